module disagg.dev/e2e/pause

go 1.26
