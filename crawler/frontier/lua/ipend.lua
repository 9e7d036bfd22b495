-- Requests on one IP address ended: they stop counting, and hosts that wait
-- for the address (ipgate.lua) are woken, as many as it has room for, each
-- with a place reserved.
--
-- The hosts are parked in their own partitions, which a script here cannot
-- touch (another slot on a Cluster): the caller wakes each one there
-- (ipwake.lua), at the time given, and if a host was no longer parked it
-- asks again with no request ended (the JSON object alone) for the next
-- one. A wake lost with its worker is made up by the partition's own
-- fallback wake, and its reservation runs out.
--
-- KEYS     as ipgate.lua: the gate hash, the requests in flight, the waiting
--          hosts, the reservations
-- ARGV[1]  a JSON object by name (scriptargs.ip_limits): concurrency (0: no
--          limit), delay_ms, reserve_ms, how long a reservation holds
-- then the requests that ended (lease tokens, "R" .. host; as many as there
-- are: positional)
-- Returns {at_ms, "P\nHOST", ...}: whom to wake, and from when it may start.
for i = 2, #ARGV do redis.call('ZREM', KEYS[2], ARGV[i]) end
if redis.call('EXISTS', KEYS[3]) == 0 then return {} end  -- nobody waits: the usual case
local now = now_ms()
local st = redis.call('HMGET', KEYS[1], IG.next_start, IG.last_wake, IG.ctl_concurrency,
                      IG.ctl_delay, IG.ctl_paused)
if st[5] then return {} end
local a = cjson.decode(ARGV[1])
local conc = tonumber(st[3] or a.concurrency)
local delay = delay_in_force(a.delay_ms, st[4])
-- Without a concurrency limit the address is only paced: one waiting host
-- for each request that ended keeps it busy.
local room = 1
if conc > 0 then room = ip_room(KEYS[2], KEYS[4], conc, now) end
if room <= 0 then return {} end
return ip_pop_waiters(KEYS, room, conc, delay, st, a.reserve_ms, now)
