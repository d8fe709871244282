"""The worker process: claim, execute, heartbeat, rescue, fire schedules, stop gracefully."""
