-- purpose: queue wait (start - arrival) over time: per time bucket since each run's first
--          arrival, the arrivals and the p50/p95/p99 wait, for both runs.
-- parameters: $failing (run id), $comparator (run id), $bucket_us (bucket width, microseconds)
-- columns: role, run_id, bucket, bucket_start_us, n, p50_wait_us, p95_wait_us, p99_wait_us,
--          max_wait_us
WITH r AS (
    SELECT
        CASE WHEN run_id = $failing THEN 'failing' ELSE 'comparator' END AS role,
        run_id,
        arrival_us - min(arrival_us) OVER (PARTITION BY run_id) AS t_us,
        start_us - arrival_us AS wait_us
    FROM requests
    WHERE run_id IN ($failing, $comparator)
)
SELECT
    role,
    run_id,
    CAST(floor(t_us / $bucket_us) AS BIGINT) AS bucket,
    floor(t_us / $bucket_us) * $bucket_us AS bucket_start_us,
    count(*) AS n,
    quantile_cont(wait_us, 0.50) AS p50_wait_us,
    quantile_cont(wait_us, 0.95) AS p95_wait_us,
    quantile_cont(wait_us, 0.99) AS p99_wait_us,
    max(wait_us) AS max_wait_us
FROM r
GROUP BY ALL
ORDER BY role DESC, bucket
