package syncer
