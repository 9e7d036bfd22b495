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
-- Places are handed out first come, first served. A host the address had no
-- room for waits in its queue (KEYS[3]); when room comes (ipend.lua), or when
-- a host new to the address finds room (ipjoin.lua), the host gets a place
-- reserved for a while (KEYS[4], by expiry): the next request of another
-- host cannot take it, so a host woken for a place finds it there.
--
-- A request that cannot start is not kept waiting in its worker, where it
-- would hold a download slot: its host is parked in its partition (the
-- release's "ipwait") until it is woken:
-- * full (as many in flight and reserved as the concurrency), or paused by
--   an operator: the host joins the queue; the end of a request, or the
--   resume, wakes it;
-- * its turn not come (the delay): the host is given a wake time of its own,
--   one delay after the last one handed out (wk), so hosts parked together
--   come back one per turn instead of all racing for the next.
--
-- KEYS[1]  the address's gate hash: s next start ms, wk last wake handed out
--          ms, qn the last queue number; live control xc, xd, xp as for a site
-- KEYS[2]  its requests in flight (zset by expiry ms), KEYS[3] its waiting hosts
--          ("P\nHOST" in the order they came: qn), KEYS[4] hosts with a place reserved
--          ("P\nHOST" by expiry ms)
-- ARGV[1]  a JSON object by name (scriptargs.ipgate_args): concurrency (0: no
--          limit), delay_ms, jitter (0..1); request, the request (its lease
--          token, or "R" .. host for a robots.txt); lease_ms, its lease's;
--          earlier, the turn of its earlier pass (0 without a delay; left out
--          for a first pass); waiter, its host as "P\nHOST"; in_place_ms: a
--          wait up to this long is answered as such (the worker waits it out
--          in place)
-- Returns {0, turn, spare}: start now (turn: the address's next start, 0
-- without a delay; spare 1 when at most half the address's places are
-- taken, this one included, or it has no limit: nobody waits for it, and its
-- worker may keep the place a moment for its next request there,
-- scheduling/ipplaces.py); {ms, 0}: wait in place (ms <= in_place_ms) or park the host that long;
-- {-2, ms}: full, park the host until a request ends, or at the latest
-- until the first place in flight runs out (ms from now: a place whose worker
-- died ends so, and nobody's end wakes the waiting hosts); {-1, 0}: paused
-- by an operator, park the host until the address is resumed.
local now = now_ms()
local st = redis.call('HMGET', KEYS[1], IG.next_start, IG.last_wake, IG.ctl_concurrency,
                      IG.ctl_delay, IG.ctl_paused)
local a = cjson.decode(ARGV[1])
local conc = tonumber(st[3] or a.concurrency)
local delay = delay_in_force(a.delay_ms, st[4])
local member, lease_ms, earlier, waiter = a.request, a.lease_ms, a.earlier, a.waiter
local in_place = a.in_place_ms

local function queue_host()
  redis.call('ZREM', KEYS[4], waiter)
  redis.call('ZADD', KEYS[3], 'NX', hincr(KEYS[1], IG.waiters, 1), waiter)
  ip_keep(KEYS[1], IP_IDLE_MS, st)
  ip_keep(KEYS[3], IP_IDLE_MS)
end

if st[5] then
  queue_host()  -- the resume wakes it (control.py)
  return {-1, 0}
end

-- A second pass of a request (its turn went stale) that holds its place
-- keeps it. Others are counted the cheap way first: only an address that
-- looks full is cleaned of requests and reservations that ran out, and looked
-- at for this request's host's reservation.
local holds = earlier ~= nil and redis.call('ZSCORE', KEYS[2], member)
local reserved = nil  -- places reserved (nil: not counted)
local spare = conc == 0 and 1 or 0
if conc > 0 and not holds then
  reserved = redis.call('ZCARD', KEYS[4])
  local busy = redis.call('ZCARD', KEYS[2]) + reserved
  if busy >= conc then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
    reserved = redis.call('ZCARD', KEYS[4])
    busy = redis.call('ZCARD', KEYS[2]) + reserved
        - (redis.call('ZSCORE', KEYS[4], waiter) and 1 or 0)
  end
  if busy >= conc then
    queue_host()
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {-2, #first > 0 and math.max(tonumber(first[2]) - now, 0) or 0}
  end
  if (busy + 1) * 2 <= conc then spare = 1 end
end

local gate = num(st[1], 0)
if delay > 0 and now < gate and not (earlier ~= nil and earlier == gate) then
  local wait = gate - now
  if wait <= in_place then return {wait, 0} end
  local at = math.max(gate, num(st[2], 0) + delay)
  redis.call('HSET', KEYS[1], IG.last_wake, at)
  ip_keep(KEYS[1], IP_IDLE_MS, st)
  return {at - now, 0}
end

if reserved ~= 0 then redis.call('ZREM', KEYS[4], waiter) end  -- (its reservation is used)
redis.call('ZADD', KEYS[2], now + lease_ms, member)
ip_keep(KEYS[2], lease_ms)
local turn = 0
if delay > 0 then
  turn = now + math.floor(delay * (1 - a.jitter))
  redis.call('HSET', KEYS[1], IG.next_start, turn)
  ip_keep(KEYS[1], IP_IDLE_MS, st)
end
return {0, turn, spare}
