-- Hold a host back now, for every worker: the server asked us to wait.
--
-- The release of the URL that got the 429 / 503 holds the host too, but only
-- once its response has gone through the engine, tens of milliseconds or more
-- later; meanwhile other workers could claim and start the host's next URLs.
-- The retry middleware calls this as soon as the answer arrives. The hold
-- only ever grows (the later of the two ends wins): w keeps the host out of
-- the ready set (no claims) and bk keeps URLs claimed before from starting
-- (start.lua).
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix
-- ARGV[2]  the rest, a JSON object by name (scriptargs.hold_args): host, hold_ms
-- Returns 1, or 0 when the frontier does not know the host.
local p, a = ARGV[1], cjson.decode(ARGV[2])
local host = a.host
if redis.call('EXISTS', p .. ':h:' .. host) == 0 then return 0 end
local sk = site_key(p, host)  -- the server asked: every scheme and port of its name waits
hold_host(sk, now_ms() + a.hold_ms)
-- A host that asked us to slow down gets one request at a time from now on:
-- its next URL is only claimed once the one in flight has ended, so no request
-- can overlap an answer that may carry another Retry-After.
redis.call('HSET', sk, S.concurrency, 1)
refresh_site(p, host)
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return 1
