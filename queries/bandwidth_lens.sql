-- purpose: the seed's bandwidth lens over a series of runs in tuning order — working-set
--          pressure (p95 working set of a fusion-group instance, or of a lone op, against on-chip
--          capacity) and bytes moved against the profile's bandwidth (achieved bytes/s in
--          execution ops over the profile's HBM bandwidth), with the latency tail, each run
--          placed in a zone: 'baseline' (the first run), 'saturation' (bandwidth use >=
--          $saturation_util, or a working set over capacity that grew more than
--          $pressure_growth times the baseline's), 'unstable tail' (p99/p50 above
--          $unstable_ratio times the baseline's), else 'tuning candidate'.
-- parameters: $run_ids (list of run ids, tuning order), $onchip_bytes (on-chip capacity, bytes),
--             $hbm_bytes_per_s (profile bandwidth), $saturation_util (e.g. 0.8),
--             $unstable_ratio (e.g. 1.5), $pressure_growth (e.g. 1.25)
-- columns: ord, run_id, n_requests, working_set_bytes, pressure, bytes_moved, exec_us,
--          achieved_bytes_per_s, bandwidth_util, p50_us, p99_us, tail_ratio, zone
WITH series AS (
    SELECT unnest($run_ids) AS run_id, generate_subscripts($run_ids, 1) AS ord
),
ev AS (
    SELECT e.run_id, e.request_id, e.fusion_group, e.event_id, e.bytes, e.dur_us, e.stage
    FROM events e
    JOIN series USING (run_id)
    WHERE e.request_id IS NOT NULL AND e.stage IS NOT NULL
),
instances AS (
    SELECT
        run_id,
        sum(coalesce(bytes, 0)) AS ws
    FROM ev
    GROUP BY run_id, request_id,
        CASE WHEN fusion_group >= 0 THEN fusion_group ELSE -1 - event_id END
),
ws AS (
    SELECT run_id, quantile_cont(ws, 0.95) AS working_set_bytes
    FROM instances
    GROUP BY run_id
),
moved AS (
    SELECT run_id, sum(coalesce(bytes, 0)) AS bytes_moved, sum(dur_us) AS exec_us
    FROM ev
    WHERE stage = 'execution'
    GROUP BY run_id
),
lat AS (
    SELECT
        r.run_id,
        count(*) AS n_requests,
        quantile_cont(r.latency_us, 0.50) AS p50_us,
        quantile_cont(r.latency_us, 0.99) AS p99_us
    FROM requests r
    JOIN series USING (run_id)
    GROUP BY r.run_id
),
m AS (
    SELECT
        s.ord,
        s.run_id,
        coalesce(lat.n_requests, 0) AS n_requests,
        ws.working_set_bytes,
        ws.working_set_bytes / $onchip_bytes AS pressure,
        moved.bytes_moved,
        moved.exec_us,
        moved.bytes_moved / nullif(moved.exec_us, 0) * 1e6 AS achieved_bytes_per_s,
        moved.bytes_moved / nullif(moved.exec_us, 0) * 1e6 / $hbm_bytes_per_s AS bandwidth_util,
        lat.p50_us,
        lat.p99_us,
        lat.p99_us / nullif(lat.p50_us, 0) AS tail_ratio
    FROM series s
    LEFT JOIN ws USING (run_id)
    LEFT JOIN moved USING (run_id)
    LEFT JOIN lat USING (run_id)
)
SELECT
    m.*,
    CASE
        WHEN m.ord = 1 THEN 'baseline'
        WHEN m.bandwidth_util >= $saturation_util
            OR (m.pressure >= 1
                AND m.pressure > $pressure_growth * (SELECT pressure FROM m WHERE ord = 1))
            THEN 'saturation'
        WHEN m.tail_ratio > $unstable_ratio * (SELECT tail_ratio FROM m WHERE ord = 1)
            THEN 'unstable tail'
        ELSE 'tuning candidate'
    END AS zone
FROM m
ORDER BY m.ord
