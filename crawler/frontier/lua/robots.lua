-- Store the outcome of a host's robots.txt fetch, for every worker.
-- (common.lua is prepended: now_ms, refresh_host.)
--
-- claim.lua handed the host out as a robots job (rs = "f", held by w). Here:
-- * "ok" (2xx rules, or 4xx "unavailable": allow all): the rules are stored
--   in PP:r (a blob the workers decode), cached until now + ttl; the host's
--   pacing becomes what the worker computed from the project's settings and
--   the file's Crawl-delay / Request-rate; its version rv moves on so that
--   workers reload their in-process copy; the hold is lifted.
-- * "fail" (5xx, 429, timeout, network error: "unreachable"): attempt ra + 1;
--   the next try is after base * 2^(ra - 1) ms, or the Retry-After the
--   server sent if longer, capped. A last good copy no
--   older than stale_max ms keeps serving meanwhile (RFC 9309 2.4); without
--   one the host is held (complete disallow) and, after max_attempts, the
--   caller parks its queued URLs as dead letters.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] host, ARGV[3] "ok" or "fail",
-- ARGV[4]  ttl ms, ARGV[5] blob, ARGV[6] concurrency, ARGV[7] delay ms,
-- ARGV[8]  floor ms (robots delay), ARGV[9] gap ms before the first page,
-- ARGV[10] retry base ms, ARGV[11] retry cap ms, ARGV[12] max attempts (0: no
--          parking), ARGV[13] stale max ms, ARGV[14] the shortest wait before the
--          next try, ms (the answer's Retry-After; capped like the backoff)
-- Returns {state, attempts, version}: state "rules", "stale", "unreachable"
-- or "park".
local p, host, outcome = ARGV[1], ARGV[2], ARGV[3]
local hk = p .. ':h:' .. host
local now = now_ms()
if redis.call('EXISTS', hk) == 0 then return {'gone', 0, 0} end

if outcome == 'ok' then
  local t = tonumber(redis.call('HGET', hk, 't') or '0')
  redis.call('HSET', hk, 'rs', 'k', 'rx', now + tonumber(ARGV[4]), 'ra', 0, 'w', 0,
             'c', ARGV[6], 'dl', ARGV[7], 'fl', ARGV[8], 'rt', now,
             't', math.max(t, now + tonumber(ARGV[9])))
  local version = redis.call('HINCRBY', hk, 'rv', 1)
  redis.call('HSET', p .. ':r', host, ARGV[5])
  redis.call('HINCRBY', KEYS[1], 'robots_fetched', 1)
  refresh_host(p, host)
  return {'rules', 0, version}
end

local attempts = redis.call('HINCRBY', hk, 'ra', 1)
local base, cap = tonumber(ARGV[10]), tonumber(ARGV[11])
local backoff = math.min(math.max(base * 2 ^ (attempts - 1), tonumber(ARGV[14] or '0')), cap)
local good = tonumber(redis.call('HGET', hk, 'rt') or '-1')
local version = tonumber(redis.call('HGET', hk, 'rv') or '0')
redis.call('HINCRBY', KEYS[1], 'robots_failed', 1)
if good >= 0 and now - good <= tonumber(ARGV[13]) then
  redis.call('HSET', hk, 'rs', 'k', 'rx', now + backoff, 'w', 0)
  refresh_host(p, host)
  return {'stale', attempts, version}
end
redis.call('HSET', hk, 'rs', 'u', 'w', now + backoff)
refresh_host(p, host)
local max_attempts = tonumber(ARGV[12])
if max_attempts > 0 and attempts >= max_attempts then
  return {'park', attempts, version}
end
return {'unreachable', attempts, version}
