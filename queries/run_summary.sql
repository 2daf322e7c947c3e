-- purpose: one row per committed run for `workbench runs` and the runs screen: metadata, tags,
--          request count and end-to-end latency p50/p95/p99 (tail first). quantile_cont is
--          linear interpolation, the same definition as accel.stats.quantile.
-- parameters: none
-- columns: run_id, label, hardware, model, workload, compiler, compiler_version, runtime,
--          runtime_version, driver_version, thermal_state, tags (map), imported_at,
--          n_requests, p50_us, p95_us, p99_us (null when the run has no requests);
--          LLM-serving runs also: ttft_p50_us..ttft_p99_us over requests, and n_tokens,
--          itl_p50_us..itl_p99_us over the inter-token gaps (tokens after the first): an ITL
--          tail is a tail over tokens. Null for runs without serving records.
WITH lat AS (
    SELECT
        run_id,
        count(*) AS n_requests,
        quantile_cont(latency_us, 0.50) AS p50_us,
        quantile_cont(latency_us, 0.95) AS p95_us,
        quantile_cont(latency_us, 0.99) AS p99_us,
        -- quantile_cont skips nulls: null TTFT (runs without serving records) reads as null.
        quantile_cont(ttft_us, 0.50) AS ttft_p50_us,
        quantile_cont(ttft_us, 0.95) AS ttft_p95_us,
        quantile_cont(ttft_us, 0.99) AS ttft_p99_us
    FROM requests
    GROUP BY run_id
),
itl AS (
    SELECT
        run_id,
        count(*) AS n_tokens,
        quantile_cont(gap_us, 0.50) AS itl_p50_us,
        quantile_cont(gap_us, 0.95) AS itl_p95_us,
        quantile_cont(gap_us, 0.99) AS itl_p99_us
    FROM tokens
    WHERE token > 0
    GROUP BY run_id
)
SELECT
    r.run_id,
    r.label,
    r.hardware,
    r.model,
    r.workload,
    r.compiler,
    r.compiler_version,
    r.runtime,
    r.runtime_version,
    r.driver_version,
    r.thermal_state,
    r.tags,
    r.imported_at,
    coalesce(l.n_requests, 0) AS n_requests,
    l.p50_us,
    l.p95_us,
    l.p99_us,
    l.ttft_p50_us,
    l.ttft_p95_us,
    l.ttft_p99_us,
    i.n_tokens,
    i.itl_p50_us,
    i.itl_p95_us,
    i.itl_p99_us
FROM runs AS r
LEFT JOIN lat AS l ON l.run_id = r.run_id
LEFT JOIN itl AS i ON i.run_id = r.run_id
ORDER BY r.imported_at, r.run_id
