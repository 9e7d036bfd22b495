-- Park a host whose robots.txt job found its server address with no room
-- (ipgate.lua): the job is given back unfetched (the host's robots.txt stays
-- due, rs "f", but no longer held by rw, nor its site by rj, nor counted
-- against its domain), and the host waits for the address like a page's host
-- (common.lua park_for_ip); woken, it is handed out as a robots job again.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix, ARGV[2] host, ARGV[3] address, ARGV[4] wake ms at the
--          latest, ARGV[5] how long (ms) the address is known to be the host's
-- Returns 1, or 0 if the host is gone.
local p, host, addr = ARGV[1], ARGV[2], ARGV[3]
local hk, sk = p .. ':h:' .. host, site_key(p, host)
if redis.call('EXISTS', hk) == 0 then return 0 end
local now = now_ms()
redis.call('HSET', hk, 'rw', 0)
redis.call('HSET', sk, 'rj', 0, 'ip', addr, 'ipx', now + tonumber(ARGV[5]))
domain_lease_ended(p, sk, 'R' .. host, now)
refresh_site(p, host)
park_for_ip(p, host, addr, now + tonumber(ARGV[4]))
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return 1
