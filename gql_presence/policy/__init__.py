"""Who may call, and how much: callers, limits and the rate limiter."""
