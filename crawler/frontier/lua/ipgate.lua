-- May a request connect to this IP address now? The IP scope's gate, the last
-- one before a download (after the site's and domain's, start.lua).
--
-- Many names can point at one server (shared hosting, a CDN edge), in any
-- partition, so an address's gate lives in a slot of its own ({ns/ip/ADDR})
-- and is taken in a step of its own. It counts the requests in flight on the
-- address by expiry (a vanished worker's stop counting by themselves) and
-- spaces their starts by the IP delay, with the same "earlier turn" rule as
-- start.lua: a request that passes again (its turn went stale in a stalled
-- worker) starts at once if no other request started on the address since.
--
-- A request that cannot start is not kept waiting in its worker, where it
-- would hold a download slot: its host is parked in its partition (the
-- release's "ipwait") until it is woken:
-- * full (as many in flight as the concurrency): the host joins the
--   address's queue of waiting hosts (KEYS[3], first come first served); the
--   end of a request (ipend.lua) wakes as many as have room;
-- * its turn not come (the delay): the host is given a wake time of its own,
--   one delay after the last one handed out (wk), so hosts parked together
--   come back one per turn instead of all racing for the next.
--
-- KEYS[1]  the address's gate hash: s next start ms, wk last wake handed out
--          ms; live control xc, xd, xp as for a site
-- KEYS[2]  its requests in flight (zset by expiry ms), KEYS[3] its waiting hosts
--          ("P\nHOST" by when they came)
-- ARGV[1]  concurrency (0: no limit), ARGV[2] delay ms, ARGV[3] jitter (0..1)
-- ARGV[4]  the request (its lease token, or "R" .. host for a robots.txt)
-- ARGV[5]  its lease ms, ARGV[6] the turn of its earlier pass or ''
-- ARGV[7]  its host as "P\nHOST" ('': a robots.txt job, which waits in
--          place and is not queued), ARGV[8] a wait up to this long (ms) is
--          answered as such (the worker waits it out in place)
-- Returns {0, turn}: start now (turn: the address's next start, 0 without a
-- delay); {ms, 0}: wait in place (ms <= ARGV[8]) or park the host that long;
-- {-2, 0}: full, park the host until a request ends; {-1, 0}: paused by an
-- operator, park the host until the address is resumed.
local now = now_ms()
local st = redis.call('HMGET', KEYS[1], 's', 'wk', 'xc', 'xd', 'xp')
local conc = tonumber(st[3] or ARGV[1])
local delay = delay_in_force(ARGV[2], st[4])
local member, lease_ms, earlier = ARGV[4], tonumber(ARGV[5]), ARGV[6]
local in_place = tonumber(ARGV[8])
local idle_ms = 3600000  -- an address unused this long is forgotten (its overrides stay)

local function keep(key, ms)
  if key == KEYS[1] and (st[3] or st[4] or st[5]) then return end
  redis.call('PEXPIRE', key, ms)
end

-- The host waits in the address's queue (a robots.txt job waits in place).
local function queue_host()
  if ARGV[7] ~= '' then
    redis.call('ZADD', KEYS[3], 'NX', now, ARGV[7])
    keep(KEYS[3], idle_ms)
  end
end

if st[5] then
  queue_host()  -- the resume wakes it (control.py)
  return {-1, 0}
end

-- Counted the cheap way first: only an address that looks full is cleaned
-- of requests whose lease ran out, and looked at for this request's own place.
local busy = redis.call('ZCARD', KEYS[2])
if conc > 0 and busy >= conc then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  busy = redis.call('ZCARD', KEYS[2]) - (redis.call('ZSCORE', KEYS[2], member) and 1 or 0)
end
if conc > 0 and busy >= conc then
  queue_host()
  return {-2, 0}
end

local gate = tonumber(st[1] or '0')
if delay > 0 and now < gate and not (earlier ~= '' and tonumber(earlier) == gate) then
  local wait = gate - now
  if wait <= in_place then return {wait, 0} end
  local at = math.max(gate, tonumber(st[2] or '0') + delay)
  redis.call('HSET', KEYS[1], 'wk', at)
  keep(KEYS[1], idle_ms)
  return {at - now, 0}
end

redis.call('ZADD', KEYS[2], now + lease_ms, member)
keep(KEYS[2], lease_ms)
local turn = 0
if delay > 0 then
  turn = now + math.floor(delay * (1 - tonumber(ARGV[3])))
  redis.call('HSET', KEYS[1], 's', turn)
  keep(KEYS[1], idle_ms)
end
return {0, turn}
