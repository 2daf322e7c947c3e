-- purpose: a run's latency SLO, when its requests carry one (the trigger's SLO-based threshold)
-- parameters: $run_id (run id)
-- columns: sla_us (median over the run's requests; NULL when none has one), n (requests with one)
SELECT median(sla_us) AS sla_us, count(sla_us) AS n
FROM requests
WHERE run_id = $run_id
