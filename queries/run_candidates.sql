-- purpose: comparator candidates for a failing run — every other committed run with what the
--          ranking needs: same model / workload, request count, tail, and time apart.
-- parameters: $failing (run id)
-- columns: run_id, label, model, workload, same_model, same_workload, n_requests, p99_us,
--          seconds_apart, seconds_after (signed: > 0 when the run was imported after the
--          failing run), imported_at
WITH f AS (
    SELECT * FROM runs WHERE run_id = $failing
),
req AS (
    SELECT run_id, count(*) AS n_requests, quantile_cont(latency_us, 0.99) AS p99_us
    FROM requests
    GROUP BY run_id
)
SELECT
    r.run_id,
    r.label,
    r.model,
    r.workload,
    r.model IS NOT DISTINCT FROM f.model AS same_model,
    r.workload IS NOT DISTINCT FROM f.workload AS same_workload,
    coalesce(req.n_requests, 0) AS n_requests,
    req.p99_us,
    abs(epoch(r.imported_at) - epoch(f.imported_at)) AS seconds_apart,
    epoch(r.imported_at) - epoch(f.imported_at) AS seconds_after,
    r.imported_at
FROM runs r
CROSS JOIN f
LEFT JOIN req ON req.run_id = r.run_id
WHERE r.run_id <> $failing
ORDER BY r.run_id
