-- purpose: whether each of two runs holds LLM-serving tokens, and how its records were joined.
-- parameters: $failing, $comparator (run ids)
-- columns: run_id, tokens, serving_join, serving_records, serving_matched
SELECT
    r.run_id,
    (SELECT count(*) FROM tokens t WHERE t.run_id = r.run_id) AS tokens,
    r.serving_join,
    r.serving_records,
    r.serving_matched
FROM runs r
WHERE r.run_id IN ($failing, $comparator)
ORDER BY r.run_id
