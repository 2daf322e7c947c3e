-- purpose: the compile profile of one run for the closure summary's closed loop: compilations,
--          recompiles (with a recompile reason), failures, cache hits and total compile time from
--          the compiler's own log, and the ops that fell back or recompiled in the trace.
-- parameters: $run_id (run id)
-- columns: compiles, recompiles, failed_compiles, cache_hits, compile_us, fallback_ops,
--          recompile_events, ops
SELECT
    (SELECT count(*) FROM compiles WHERE run_id = $run_id) AS compiles,
    (SELECT count(*) FROM compiles WHERE run_id = $run_id AND recompile_reason IS NOT NULL)
        AS recompiles,
    (SELECT count(*) FROM compiles WHERE run_id = $run_id AND fail_reason IS NOT NULL)
        AS failed_compiles,
    (SELECT count(*) FROM compiles WHERE run_id = $run_id AND cache_hit) AS cache_hits,
    (SELECT coalesce(sum(duration_us), 0) FROM compiles WHERE run_id = $run_id) AS compile_us,
    (SELECT count(*) FROM events WHERE run_id = $run_id AND fallback) AS fallback_ops,
    (SELECT count(*) FROM events WHERE run_id = $run_id AND recompile) AS recompile_events,
    (SELECT count(*) FROM events WHERE run_id = $run_id AND stage IS NOT NULL) AS ops
