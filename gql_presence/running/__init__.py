"""Running a process: the Redis clients, the embedded Redis, the workers, the sweep and the
demo data."""
