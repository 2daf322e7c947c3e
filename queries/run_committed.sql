-- purpose: whether a run is committed in the store (its runs row is written last), without
--          counting its requests as run_presence does.
-- parameters: $run_id (run id)
-- columns: n_runs (0 or 1)
SELECT count(*) AS n_runs FROM runs WHERE run_id = $run_id
