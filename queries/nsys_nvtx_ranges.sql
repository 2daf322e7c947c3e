-- purpose: closed NVTX ranges of an Nsight Systems export (push/pop and start/end), named by
--          their inline text or else their interned textId; they become user annotations.
-- parameters: $push_pop, $start_end (NVTX_EVENTS.eventType of the two range kinds)
-- columns: start, end (ns since session start), pid, tid (from globalTid), text, domain_id
SELECT
    n.start,
    n."end",
    (CAST(n.globalTid AS INTEGER) >> 24) & 16777215 AS pid,
    CAST(n.globalTid AS INTEGER) & 16777215 AS tid,
    COALESCE(n.text, s.value) AS text,
    n.domainId AS domain_id
FROM NVTX_EVENTS AS n
LEFT JOIN StringIds AS s ON s.id = n.textId
WHERE n.eventType IN ($push_pop, $start_end) AND n."end" IS NOT NULL
ORDER BY n.rowid
