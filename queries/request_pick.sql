-- purpose: the request of a run at a latency quantile (the drill-down's "p99 request"), over
--          all its requests or only those of one shape bucket; by total latency or by one
--          stage's exclusive time. The request whose value is the quantile_disc value; ties go
--          to the earliest arrival.
-- parameters: $run_id (run id), $shape_key (shape bucket, or NULL for every request),
--             $stage (ingress | lowering | scheduling | execution | assembly, or NULL: latency),
--             $q (quantile in [0, 1], e.g. 0.99)
-- columns: request_id, shape_key, latency_us, value_us (the ranked value), arrival_us,
--          n_requests (how many requests the quantile was taken over)
WITH r AS (
    SELECT
        request_id,
        shape_key,
        latency_us,
        arrival_us,
        CASE $stage
            WHEN 'ingress' THEN ingress_us
            WHEN 'lowering' THEN lowering_us
            WHEN 'scheduling' THEN scheduling_us
            WHEN 'execution' THEN execution_us
            WHEN 'assembly' THEN assembly_us
            ELSE latency_us
        END AS value_us
    FROM requests
    WHERE run_id = $run_id AND ($shape_key IS NULL OR shape_key = $shape_key)
),
target AS (
    SELECT quantile_disc(value_us, $q) AS v, count(*) AS n FROM r
)
SELECT r.request_id, r.shape_key, r.latency_us, r.value_us, r.arrival_us, target.n AS n_requests
FROM r, target
WHERE r.value_us = target.v
ORDER BY r.arrival_us, r.request_id
LIMIT 1
