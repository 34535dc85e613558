"""What operators see: the request log, metrics, log filters and traces."""
