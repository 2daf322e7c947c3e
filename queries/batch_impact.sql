-- purpose: batch policy impact — end-to-end latency and queue wait by batch size, both runs.
-- parameters: $failing (run id), $comparator (run id)
-- columns: role, run_id, batch_size, n, share (of the run's requests), p50_us, p95_us, p99_us,
--          p95_wait_us
SELECT
    CASE WHEN run_id = $failing THEN 'failing' ELSE 'comparator' END AS role,
    run_id,
    batch_size,
    count(*) AS n,
    count(*) / sum(count(*)) OVER (PARTITION BY run_id) AS share,
    quantile_cont(latency_us, 0.50) AS p50_us,
    quantile_cont(latency_us, 0.95) AS p95_us,
    quantile_cont(latency_us, 0.99) AS p99_us,
    quantile_cont(start_us - arrival_us, 0.95) AS p95_wait_us
FROM requests
WHERE run_id IN ($failing, $comparator)
GROUP BY run_id, batch_size
ORDER BY role DESC, batch_size
