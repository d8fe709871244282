-- rota schema, version 9: the trace context of the code that enqueued a job (propagation
-- headers such as traceparent, as a JSON object), so the job's execution joins that trace.
-- A nullable column without a default: adding it rewrites nothing.
ALTER TABLE rota_jobs ADD COLUMN trace_context json;
