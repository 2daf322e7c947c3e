-- purpose: per-request samples of one run for the validation judge, the production-like replay
--          check and the closure summary: latency, exclusive stage times, quality, shape bucket,
--          and how many of the request's ops fell back or recompiled.
-- parameters: $run_id (run id)
-- columns: request_id, arrival_us, end_us, latency_us, ingress_us, lowering_us, scheduling_us,
--          execution_us, assembly_us, other_us, quality, shape_key, fallback_ops, recompile_ops
WITH ev AS (
    SELECT
        request_id,
        count(*) FILTER (WHERE fallback) AS fallback_ops,
        count(*) FILTER (WHERE recompile) AS recompile_ops
    FROM events
    WHERE run_id = $run_id AND request_id IS NOT NULL AND (fallback OR recompile)
    GROUP BY request_id
)
SELECT
    r.request_id,
    r.arrival_us,
    r.end_us,
    r.latency_us,
    r.ingress_us,
    r.lowering_us,
    r.scheduling_us,
    r.execution_us,
    r.assembly_us,
    r.other_us,
    r.quality,
    r.shape_key,
    CAST(coalesce(ev.fallback_ops, 0) AS BIGINT) AS fallback_ops,
    CAST(coalesce(ev.recompile_ops, 0) AS BIGINT) AS recompile_ops
FROM requests r
LEFT JOIN ev ON ev.request_id = r.request_id
WHERE r.run_id = $run_id
ORDER BY r.arrival_us, r.request_id
