-- purpose: the epoch time of the session start (the export's times are ns since then).
-- parameters: none
-- columns: utc_epoch_ns
SELECT utcEpochNs AS utc_epoch_ns
FROM TARGET_INFO_SESSION_START_TIME
LIMIT 1
