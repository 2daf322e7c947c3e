-- purpose: tail-latency drivers as shares of the p99 gap. For each run the tail is its requests
--          at or above its own $tail_q latency quantile; per driver, the mean per-request driver
--          time in the failing tail minus the comparator tail, over the p99 gap. Drivers overlap
--          (a recompile also delays the requests queued behind it), so shares need not sum to 1.
--          Drivers: queueing (start - arrival), core_imbalance (busiest core minus the mean core
--          busy time within the request, over real cores: core -1 marks serial ops, not a core), mapping_fallback (time in fallback ops), recompile (time
--          in recompiling events).
-- parameters: $failing (run id), $comparator (run id), $tail_q (e.g. 0.95),
--             $skip_failing, $skip_comparator (request ids of each run to leave out; [] none)
-- columns: driver, failing_tail_us, comparator_tail_us, delta_us, p99_gap_us, share,
--          n_failing_tail, n_comparator_tail
WITH r AS (
    SELECT run_id, request_id, latency_us, start_us - arrival_us AS queue_us
    FROM requests
    WHERE run_id IN ($failing, $comparator)
      AND NOT list_contains(
          CASE WHEN run_id = $failing THEN $skip_failing ELSE $skip_comparator END, request_id
      )
),
cut AS (
    SELECT
        run_id,
        quantile_cont(latency_us, $tail_q) AS tail_cut,
        quantile_cont(latency_us, 0.99) AS p99
    FROM r
    GROUP BY run_id
),
tail_ids AS (
    SELECT r.run_id, r.request_id
    FROM r
    JOIN cut USING (run_id)
    WHERE r.latency_us >= cut.tail_cut
),
-- Only the tail's events are aggregated (a semi-join): about 1 in 20 of a run's events. One
-- scan per run, on request_id alone: a (run_id, request_id) key for each of millions of events
-- costs a quarter more.
ev AS (
    SELECT run_id, request_id, core, dur_us, fallback, recompile
    FROM events
    WHERE run_id = $failing
      AND request_id IN (SELECT request_id FROM tail_ids WHERE run_id = $failing)
    UNION ALL
    SELECT run_id, request_id, core, dur_us, fallback, recompile
    FROM events
    WHERE run_id = $comparator AND $comparator <> $failing
      AND request_id IN (SELECT request_id FROM tail_ids WHERE run_id = $comparator)
),
per_core AS (
    SELECT run_id, request_id, core, sum(dur_us) AS busy
    FROM ev
    WHERE core IS NOT NULL AND core >= 0
    GROUP BY run_id, request_id, core
),
imbalance AS (
    SELECT run_id, request_id, max(busy) - avg(busy) AS imbalance_us
    FROM per_core
    GROUP BY run_id, request_id
),
flagged AS (
    SELECT
        run_id,
        request_id,
        sum(CASE WHEN fallback THEN dur_us ELSE 0 END) AS fallback_us,
        sum(CASE WHEN recompile THEN dur_us ELSE 0 END) AS recompile_us
    FROM ev
    GROUP BY run_id, request_id
),
tail AS (
    SELECT
        r.run_id,
        r.queue_us,
        coalesce(i.imbalance_us, 0) AS imbalance_us,
        coalesce(f.fallback_us, 0) AS fallback_us,
        coalesce(f.recompile_us, 0) AS recompile_us
    FROM r
    JOIN cut USING (run_id)
    LEFT JOIN imbalance i USING (run_id, request_id)
    LEFT JOIN flagged f USING (run_id, request_id)
    WHERE r.latency_us >= cut.tail_cut
),
means AS (
    SELECT
        run_id,
        count(*) AS n,
        avg(queue_us) AS queueing,
        avg(imbalance_us) AS core_imbalance,
        avg(fallback_us) AS mapping_fallback,
        avg(recompile_us) AS recompile
    FROM tail
    GROUP BY run_id
),
long AS (
    UNPIVOT means ON queueing, core_imbalance, mapping_fallback, recompile
    INTO NAME driver VALUE us
),
gap AS (
    SELECT
        (SELECT p99 FROM cut WHERE run_id = $failing)
        - (SELECT p99 FROM cut WHERE run_id = $comparator) AS p99_gap_us
)
-- Parallel float sums make the last bits depend on thread scheduling; rounding to a nanosecond
-- (and shares to 1e-6) keeps this proving artifact identical from run to run.
SELECT
    f.driver,
    round(f.us, 3) AS failing_tail_us,
    round(c.us, 3) AS comparator_tail_us,
    round(f.us - c.us, 3) AS delta_us,
    gap.p99_gap_us,
    round(CASE WHEN gap.p99_gap_us > 0 THEN (f.us - c.us) / gap.p99_gap_us END, 6) AS share,
    f.n AS n_failing_tail,
    c.n AS n_comparator_tail
FROM (SELECT * FROM long WHERE run_id = $failing) f
JOIN (SELECT * FROM long WHERE run_id = $comparator) c USING (driver)
CROSS JOIN gap
ORDER BY share DESC NULLS LAST
