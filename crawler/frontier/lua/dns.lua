-- A host's name failed to resolve (SERVFAIL, or no answer in time): hold the
-- host with backoff, for every worker, or say it is to be parked.
-- (common.lua is prepended: now_ms, refresh_host, hold_host.)
--
-- The failures of one name are counted in its host's hash, not per URL: the
-- name is what fails, and every worker must agree on when to give up. Fields:
-- da  failed lookups in a row (release.lua clears it on any answer from the
--     host: a success proves the name resolves; requeue.lua on a requeue)
-- du  the current DNS hold ends at this ms. A failure reported while it runs
--     belongs to the same episode (the URLs claimed together with the one
--     that failed first, by this worker or another): it is not counted again,
--     its URL just waits for the hold's end.
-- After max attempts failed lookups the caller parks the host ("dns-failed").
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix
-- ARGV[2]  the rest, a JSON object by name (scriptargs.dns_args): host;
--          base_ms and cap_ms, the backoff's; max_attempts (0: never park);
--          job (true: the lookup was a robots job's: claim.lua held the host
--          for the whole robots fetch, that hold is replaced, the fetch is not
--          going to happen); count (false: the failure must not count, the
--          nameservers answer nothing at all, an outage, not this name: the
--          host is held for its current backoff, its count unchanged); kind,
--          the failure's (servfail, timeout), kept as dk with the hold (and
--          dh, the hold's length: reports tell a long hold from a short one)
-- Returns {verdict, attempts, wait ms, counted}: verdict "hold" (the host and
-- the URL wait wait ms), "park", or "gone" (the frontier does not know it).
local p, a = ARGV[1], cjson.decode(ARGV[2])
local host = a.host
local base, cap, max_attempts = a.base_ms, a.cap_ms, a.max_attempts
local job = a.job == true
local count = a.count ~= false
local hk = p .. ':h:' .. host
if redis.call('EXISTS', hk) == 0 then return {'gone', 0, 0, 0} end
local sk = site_key(p, host)  -- a name fails for all its schemes and ports
local now = now_ms()
local st = redis.call('HMGET', sk, S.dns_failures, S.dns_until)
local attempts, hold_end = num(st[1], 0), num(st[2], 0)

-- A robots job whose lookup failed is over: its fetch is not going to
-- happen. Its host waits for the DNS hold instead of the fetch's whole
-- lease, and its registered domain counts it in flight no more (a host
-- waiting for the domain may take its place).
local function job_over(until_ms)
  if not job then return end
  redis.call('HSET', hk, H.robots_wait, until_ms)
  redis.call('HSET', sk, S.robots_job, 0)
  domain_lease_ended(p, sk, 'R' .. host, now)
end

if hold_end > now then
  job_over(hold_end)
  refresh_site(p, host)
  return {'hold', attempts, hold_end - now, 0}
end
if count then attempts = attempts + 1 end
if count and max_attempts > 0 and attempts >= max_attempts then
  redis.call('HSET', sk, S.dns_failures, attempts, S.dns_until, 0)
  job_over(0)
  refresh_site(p, host)
  return {'park', attempts, 0, 1}
end
local wait = math.min(base * 2 ^ math.max(attempts - 1, 0), cap)
redis.call('HSET', sk, S.dns_failures, attempts, S.dns_until, now + wait,
           S.dns_kind, a.kind or 'servfail', S.dns_hold, wait)
job_over(now + wait)
hold_host(sk, now + wait)  -- no claim (w), and no start (bk) of URLs claimed already
refresh_site(p, host)
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return {'hold', attempts, wait, count and 1 or 0}
