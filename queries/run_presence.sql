-- purpose: whether a run is committed in the store, and how many requests it has.
-- parameters: $run_id (run id)
-- columns: n_runs (0 or 1), n_requests
SELECT
    (SELECT count(*) FROM runs WHERE run_id = $run_id) AS n_runs,
    (SELECT count(*) FROM requests WHERE run_id = $run_id) AS n_requests
