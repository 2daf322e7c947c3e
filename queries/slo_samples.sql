-- purpose: the units of one serving SLO in two runs, with their stage split: ttft (each request's
--          first token, from arrival), itl (every later token's gap: a tail over tokens, not
--          requests), tpot (per request, the mean gap after the first token), e2e (the request).
-- parameters: $failing, $comparator (run ids), $slo ('ttft' | 'itl' | 'tpot' | 'e2e')
-- columns: role, request_id (request, or request#token for itl), latency_us (the SLO's value),
--          ingress_us, lowering_us, scheduling_us, execution_us, assembly_us, other_us
WITH units AS (
    SELECT
        run_id,
        CASE WHEN token = 0 THEN request_id ELSE request_id || '#' || token::VARCHAR END
            AS request_id,
        gap_us AS latency_us,
        ingress_us, lowering_us, scheduling_us, execution_us, assembly_us, other_us
    FROM tokens
    WHERE ($slo = 'ttft' AND token = 0) OR ($slo = 'itl' AND token >= 1)
    UNION ALL
    SELECT
        run_id, request_id, avg(gap_us), avg(ingress_us), avg(lowering_us), avg(scheduling_us),
        avg(execution_us), avg(assembly_us), avg(other_us)
    FROM tokens
    WHERE $slo = 'tpot' AND token >= 1
    GROUP BY run_id, request_id
    UNION ALL
    SELECT
        run_id, request_id, latency_us, ingress_us, lowering_us, scheduling_us, execution_us,
        assembly_us, other_us
    FROM requests
    WHERE $slo = 'e2e' AND coalesce(ok, true)
)
SELECT
    CASE WHEN run_id = $failing THEN 'failing' ELSE 'comparator' END AS role,
    request_id, latency_us, ingress_us, lowering_us, scheduling_us, execution_us, assembly_us,
    other_us
FROM units
WHERE run_id IN ($failing, $comparator)
ORDER BY role, request_id
