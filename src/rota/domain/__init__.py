"""Pure rules of rota: jobs, leases, retries, schedules, time. No I/O happens here."""
