-- Park a host whose robots.txt job found its server address with no room
-- (ipgate.lua): the job is given back unfetched (the host's robots.txt stays
-- due, rs "f", but no longer held by rw, nor its site by rj, nor counted
-- against its domain), and the host waits for the address like a page's host
-- (common.lua park_for_ip); woken, it is handed out as a robots job again.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix
-- ARGV[2]  the rest, a JSON object by name (scriptargs.ippark_args): host,
--          address; wake_ms, the host's wake at the latest (from now);
--          known_ms, how long the address is known to be the host's
-- Returns 1, or 0 if the host is gone.
local p, a = ARGV[1], cjson.decode(ARGV[2])
local host, addr = a.host, a.address
local hk, sk = p .. ':h:' .. host, site_key(p, host)
if redis.call('EXISTS', hk) == 0 then return 0 end
local now = now_ms()
redis.call('HSET', hk, H.robots_wait, 0)
redis.call('HSET', sk, S.robots_job, 0, S.address, addr, S.address_until, now + a.known_ms)
domain_lease_ended(p, sk, 'R' .. host, now)
refresh_site(p, host)
park_for_ip(p, host, addr, now + a.wake_ms)
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return 1
