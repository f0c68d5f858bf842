-- Up Migration
-- The trace context of each row's cause (W3C traceparent and tracestate, as the enqueuing process
-- saw it: the event it handled or the request it served), so the relay's publish continues that
-- trace instead of starting its own (packages/shared/src/telemetry/trace.ts). Null when tracing is
-- off. Bounded by their writer: a traceparent is 55 characters, a tracestate at most 512.
ALTER TABLE outbox ADD COLUMN traceparent text, ADD COLUMN tracestate text;

-- Down Migration
ALTER TABLE outbox DROP COLUMN traceparent, DROP COLUMN tracestate;
