-- purpose: the per-request serving facts of one run that mechanism witnesses read.
-- parameters: $run_id (run id)
-- columns: request_id, input_tokens, output_tokens, queue_us, preemptions, arrival_us
SELECT request_id, input_tokens, output_tokens, queue_us, preemptions, arrival_us
FROM requests
WHERE run_id = $run_id AND ttft_us IS NOT NULL
ORDER BY arrival_us, request_id
