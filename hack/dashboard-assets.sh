#!/usr/bin/env bash
# Refreshes the dashboard's vendored front-end libraries from the npm registry:
# htmx and its server-sent-events extension, at the versions pinned below.
# The files are committed, so building Nest never downloads them; this script
# is for upgrading them. It rewrites SHA256SUMS, which a unit test checks the
# embedded files against.
set -euo pipefail

HTMX_VERSION=2.0.11
HTMX_SSE_VERSION=2.2.4

dest=$(cd "$(dirname "$0")/../internal/dashboard/static/vendor" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "htmx.org@${HTMX_VERSION}" "htmx-ext-sse@${HTMX_SSE_VERSION}" >/dev/null
tar xzf "htmx.org-${HTMX_VERSION}.tgz" package/dist/htmx.min.js package/LICENSE
cp package/dist/htmx.min.js "$dest/htmx.min.js"
cp package/LICENSE "$dest/htmx.LICENSE"
rm -rf package
tar xzf "htmx-ext-sse-${HTMX_SSE_VERSION}.tgz" package/dist/sse.min.js
cp package/dist/sse.min.js "$dest/htmx-sse.min.js"
cd "$dest"
{
  echo "# htmx.org ${HTMX_VERSION}, htmx-ext-sse ${HTMX_SSE_VERSION} (npm); written by hack/dashboard-assets.sh"
  sha256sum htmx.min.js htmx-sse.min.js htmx.LICENSE
} > SHA256SUMS
echo "dashboard-assets: htmx ${HTMX_VERSION}, htmx-ext-sse ${HTMX_SSE_VERSION} in $dest"
