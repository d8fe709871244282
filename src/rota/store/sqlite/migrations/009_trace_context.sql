-- 009_trace_context: the trace context of the code that enqueued a job (propagation headers
-- such as traceparent, as JSON object text), so the job's execution joins that trace.
ALTER TABLE rota_jobs ADD COLUMN trace_context TEXT;
