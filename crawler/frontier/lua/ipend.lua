-- Requests on one IP address ended: they stop counting, and hosts that wait
-- for the address (ipgate.lua) are woken, as many as it has room for, each
-- with a place reserved.
--
-- The hosts are parked in their own partitions, which a script here cannot
-- touch (another slot on a Cluster): the caller wakes each one there
-- (ipwake.lua), at the time given, and if a host was no longer parked it
-- asks again with no request ended (ARGV[3] alone) for the next one. A wake
-- lost with its worker is made up by the partition's own fallback wake, and
-- its reservation runs out.
--
-- KEYS     as ipgate.lua: the gate hash, the requests in flight, the waiting
--          hosts, the reservations
-- ARGV[1]  concurrency (0: no limit), ARGV[2] delay ms, ARGV[3] how long (ms)
--          a reservation holds, then the requests that ended (lease tokens,
--          "R" .. host)
-- Returns {at_ms, "P\nHOST", ...}: whom to wake, and from when it may start.
local now = now_ms()
for i = 4, #ARGV do redis.call('ZREM', KEYS[2], ARGV[i]) end
if redis.call('EXISTS', KEYS[3]) == 0 then return {} end  -- nobody waits: the usual case
local st = redis.call('HMGET', KEYS[1], 's', 'wk', 'xc', 'xd', 'xp')
if st[5] then return {} end
local conc = tonumber(st[3] or ARGV[1])
local delay = delay_in_force(ARGV[2], st[4])
-- Without a concurrency limit the address is only paced: one waiting host
-- for each request that ended keeps it busy.
local room = 1
if conc > 0 then room = ip_room(KEYS[2], KEYS[4], conc, now) end
if room <= 0 then return {} end
local woken = redis.call('ZPOPMIN', KEYS[3], room)
local out = {}
local at, wk = math.max(now, num(st[1], 0)), num(st[2], 0)
for j = 1, #woken, 2 do
  if delay > 0 then
    at = math.max(at, wk + delay)
    wk = at
  end
  if conc > 0 then redis.call('ZADD', KEYS[4], at + tonumber(ARGV[3]), woken[j]) end
  out[#out + 1] = at
  out[#out + 1] = woken[j]
end
if conc > 0 then ip_keep(KEYS[4], IP_IDLE_MS) end
if delay > 0 and #woken > 0 then
  redis.call('HSET', KEYS[1], 'wk', wk)
  ip_keep(KEYS[1], IP_IDLE_MS, st)
end
return out
