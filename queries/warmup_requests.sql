-- purpose: requests of one run that are warm-up by name (e.g. record_function("warmup#0")).
-- parameters: $run_id (run id), $warmup_name (regular expression for warm-up request names)
-- columns: request_id, shape_key
SELECT request_id, shape_key
FROM requests
WHERE run_id = $run_id AND coalesce(regexp_matches(name, $warmup_name), false)
ORDER BY arrival_us, request_id
