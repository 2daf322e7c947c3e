-- purpose: the events an LLM-serving run's engine steps are read from (engine_trace.py): the
--          llm.* step, phase and membership spans and the lowering (compile) events.
-- parameters: $run_id (run id)
-- columns: name, ts_us, dur_us, tid, pid, stage, category
SELECT name, ts_us, dur_us, tid, pid, stage, category
FROM events
WHERE run_id = $run_id AND (starts_with(name, 'llm.') OR stage = 'lowering')
ORDER BY ts_us
