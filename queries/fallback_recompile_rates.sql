-- purpose: mapping fallback and recompile rates per run: ops that fell back, events that
--          recompiled, requests touched by either, and the compile log totals when the store has
--          one (compiles table): compilations, recompiles (with a recompile reason), failures,
--          cache hits and compile time.
-- parameters: $failing (run id), $comparator (run id)
-- columns: role, run_id, n_requests, n_ops, fallback_ops, fallback_rate, recompile_events,
--          requests_with_fallback, requests_with_recompile, compiles, recompiles, failed_compiles,
--          cache_hits, compile_us
WITH runs_of AS (
    SELECT run_id,
           CASE WHEN run_id = $failing THEN 'failing' ELSE 'comparator' END AS role
    FROM runs
    WHERE run_id IN ($failing, $comparator)
),
req AS (
    SELECT run_id, count(*) AS n_requests
    FROM requests
    WHERE run_id IN ($failing, $comparator)
    GROUP BY run_id
),
-- The op count in a scan of one column; the flagged events (few) each in a scan that the
-- flag's filter lets skip to them: row groups without one are passed over on their
-- statistics (a FILTER over every event would decode both flag columns in full).
ops AS (
    SELECT run_id, count(stage) AS n_ops
    FROM events
    WHERE run_id IN ($failing, $comparator)
    GROUP BY run_id
),
fallbacks AS (
    SELECT run_id, count(*) AS fallback_ops, count(DISTINCT request_id) AS requests_with_fallback
    FROM events
    WHERE run_id IN ($failing, $comparator) AND fallback
    GROUP BY run_id
),
recompiles AS (
    SELECT
        run_id,
        count(*) AS recompile_events,
        count(DISTINCT request_id) AS requests_with_recompile
    FROM events
    WHERE run_id IN ($failing, $comparator) AND recompile
    GROUP BY run_id
),
ev AS (
    SELECT
        ops.run_id,
        ops.n_ops,
        coalesce(f.fallback_ops, 0) AS fallback_ops,
        coalesce(r.recompile_events, 0) AS recompile_events,
        coalesce(f.requests_with_fallback, 0) AS requests_with_fallback,
        coalesce(r.requests_with_recompile, 0) AS requests_with_recompile
    FROM ops
    LEFT JOIN fallbacks AS f USING (run_id)
    LEFT JOIN recompiles AS r USING (run_id)
),
c AS (
    SELECT
        run_id,
        count(*) AS compiles,
        count(*) FILTER (WHERE recompile_reason IS NOT NULL) AS recompiles,
        count(*) FILTER (WHERE fail_reason IS NOT NULL) AS failed_compiles,
        count(*) FILTER (WHERE cache_hit) AS cache_hits,
        sum(duration_us) AS compile_us
    FROM compiles
    WHERE run_id IN ($failing, $comparator)
    GROUP BY run_id
)
SELECT
    runs_of.role,
    runs_of.run_id,
    coalesce(req.n_requests, 0) AS n_requests,
    coalesce(ev.n_ops, 0) AS n_ops,
    coalesce(ev.fallback_ops, 0) AS fallback_ops,
    coalesce(ev.fallback_ops, 0) / greatest(coalesce(ev.n_ops, 0), 1) AS fallback_rate,
    coalesce(ev.recompile_events, 0) AS recompile_events,
    coalesce(ev.requests_with_fallback, 0) AS requests_with_fallback,
    coalesce(ev.requests_with_recompile, 0) AS requests_with_recompile,
    coalesce(c.compiles, 0) AS compiles,
    coalesce(c.recompiles, 0) AS recompiles,
    coalesce(c.failed_compiles, 0) AS failed_compiles,
    coalesce(c.cache_hits, 0) AS cache_hits,
    coalesce(c.compile_us, 0) AS compile_us
FROM runs_of
LEFT JOIN req USING (run_id)
LEFT JOIN ev USING (run_id)
LEFT JOIN c USING (run_id)
ORDER BY runs_of.role DESC
