// Nest dashboard: the little the pages do in the browser besides htmx.
// "Copy" buttons copy the text of the element their data-copy names.
document.addEventListener("click", function (e) {
  var button = e.target.closest("[data-copy]");
  if (!button) return;
  var text = document.getElementById(button.dataset.copy).textContent;
  var done = function () { button.textContent = "Copied"; };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, function () { button.textContent = "Select and copy"; });
  } else {
    var range = document.createRange();
    range.selectNodeContents(document.getElementById(button.dataset.copy));
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    button.textContent = "Press Ctrl+C";
  }
});
