-- purpose: per shape bucket of one run, what retuning needs: traffic share, whether the bucket
--          was compiled ahead of serving, the recompiles and fallbacks it caused and their time.
-- parameters: $run_id (run id), $compiled_shapes (list of shape keys compiled at warm-up)
-- columns: shape_key, n_requests, traffic_share, compiled, recompiles, recompile_us,
--          fallback_ops, fallback_us, p95_us, p99_us
WITH r AS (
    SELECT request_id, coalesce(shape_key, '') AS shape_key, latency_us
    FROM requests
    WHERE run_id = $run_id
),
ev AS (
    SELECT
        request_id,
        count(*) FILTER (WHERE recompile) AS recompiles,
        coalesce(sum(dur_us) FILTER (WHERE recompile), 0) AS recompile_us,
        count(*) FILTER (WHERE fallback) AS fallback_ops,
        coalesce(sum(dur_us) FILTER (WHERE fallback), 0) AS fallback_us
    FROM events
    WHERE run_id = $run_id AND request_id IS NOT NULL AND (recompile OR fallback)
    GROUP BY request_id
)
SELECT
    r.shape_key,
    count(*) AS n_requests,
    count(*) / sum(count(*)) OVER () AS traffic_share,
    list_contains($compiled_shapes, r.shape_key) AS compiled,
    CAST(coalesce(sum(ev.recompiles), 0) AS BIGINT) AS recompiles,
    coalesce(sum(ev.recompile_us), 0) AS recompile_us,
    CAST(coalesce(sum(ev.fallback_ops), 0) AS BIGINT) AS fallback_ops,
    coalesce(sum(ev.fallback_us), 0) AS fallback_us,
    quantile_cont(r.latency_us, 0.95) AS p95_us,
    quantile_cont(r.latency_us, 0.99) AS p99_us
FROM r
LEFT JOIN ev USING (request_id)
GROUP BY r.shape_key
ORDER BY n_requests DESC, r.shape_key
