-- purpose: the NVTX domains an Nsight Systems export names (domain-create events), to tag each
--          range with its domain.
-- parameters: $domain_create (NVTX_EVENTS.eventType of a domain creation)
-- columns: domain_id, name
SELECT
    n.domainId AS domain_id,
    COALESCE(n.text, s.value) AS name
FROM NVTX_EVENTS AS n
LEFT JOIN StringIds AS s ON s.id = n.textId
WHERE n.eventType = $domain_create AND n.domainId IS NOT NULL
