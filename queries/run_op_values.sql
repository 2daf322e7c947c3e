-- purpose: the distinct text values of one run's attributed ops (input shapes, tiles, kernels,
--          op names),
--          so that run_ops can return small integer ids instead of millions of strings.
-- parameters: $run_id (run id), $stages (list of stage ids to keep)
-- columns: kind ('shape'|'tile'|'kernel'|'name'), value
WITH ev AS (
    SELECT shape, tile, kernel, name
    FROM events
    WHERE run_id = $run_id AND request_id IS NOT NULL AND list_contains($stages, stage)
)
SELECT 'shape' AS kind, shape AS value FROM ev WHERE shape IS NOT NULL GROUP BY shape
UNION ALL
SELECT 'tile' AS kind, tile AS value FROM ev WHERE tile IS NOT NULL GROUP BY tile
UNION ALL
SELECT 'kernel' AS kind, kernel AS value FROM ev WHERE kernel IS NOT NULL GROUP BY kernel
UNION ALL
SELECT 'name' AS kind, name AS value FROM ev WHERE name IS NOT NULL GROUP BY name
ORDER BY kind, value
