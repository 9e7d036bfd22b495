-- Hosts new to an IP address (their names were just resolved, before their
-- first claim: the DNS job, claim.lua), parked by a claim behind others of
-- the address ("W"), or parked hosts whose own time came (a wake may have
-- been lost): each may go now, with a place reserved at the address, or
-- waits in its queue, first come first served. So a thousand names on one
-- server meet its limit here, once each, instead of each being claimed,
-- refused at the gate and given back.
--
-- A host goes when it holds a place already (ipend.lua or an earlier join
-- reserved one for it: it keeps it, whatever else waits), when it is at the
-- front of the queue and the address has room, or when nobody waits and
-- there is room. Otherwise it keeps its place in the queue, or takes the
-- last one.
--
-- An address with room and hosts waiting has nobody to wake them: no request
-- on it is in flight to end (ipend.lua), its requests ran out with a
-- vanished worker, or a woken host went elsewhere. So a join that leaves room
-- also pops the queue's head into that room, and the caller wakes those
-- hosts (ipwake.lua) as after an end. Every parked host comes here at its own
-- time at the latest (claim.lua, the fallback), which makes this the
-- address's backstop: its queue moves whenever there is room, with or
-- without a request ending.
--
-- KEYS     as ipgate.lua: the gate hash, the requests in flight, the waiting
--          hosts, the reservations
-- ARGV[1]  a JSON object by name (scriptargs.ip_limits): concurrency (0: no
--          limit), delay_ms, reserve_ms, how long a reservation holds
-- then the hosts ("P\nHOST"; as many as join: positional)
-- Returns, per host, 1: it may go (reserved), 0: it waits in the queue; then
-- {at_ms, "P\nHOST"} pairs: queued hosts popped into the room left, for the
-- caller to wake.
local now = now_ms()
local st = redis.call('HMGET', KEYS[1], IG.next_start, IG.last_wake, IG.ctl_concurrency,
                      IG.ctl_delay, IG.ctl_paused)
local a = cjson.decode(ARGV[1])
local conc = tonumber(st[3] or a.concurrency)
local reserve_ms = a.reserve_ms
local delay = delay_in_force(a.delay_ms, st[4])
local paused = st[5] ~= false
local out = {}
local room = 1000000000
if paused then
  room = 0  -- everyone waits for the resume
elseif conc > 0 then
  room = math.max(ip_room(KEYS[2], KEYS[4], conc, now), 0)
end
local head = {}  -- the queue's first hosts, those the address has room for
if room > 0 and conc > 0 then
  for _, w in ipairs(redis.call('ZRANGE', KEYS[3], 0, room - 1)) do head[w] = true end
end
local function go(w)
  redis.call('ZREM', KEYS[3], w)
  if conc > 0 then redis.call('ZADD', KEYS[4], now + reserve_ms, w) end
  out[#out + 1] = 1
end
for i = 2, #ARGV do
  local w = ARGV[i]
  if not paused and conc > 0 and redis.call('ZSCORE', KEYS[4], w) then
    go(w)  -- its place is reserved (it was woken): it keeps it
  elseif room > 0 and (head[w] or redis.call('EXISTS', KEYS[3]) == 0) then
    go(w)
    room = room - 1
  else
    redis.call('ZADD', KEYS[3], 'NX', hincr(KEYS[1], IG.waiters, 1), w)
    out[#out + 1] = 0
  end
end
if room > 0 and conc > 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  for _, v in ipairs(ip_pop_waiters(KEYS, room, conc, delay, st, reserve_ms, now)) do
    out[#out + 1] = v
  end
end
ip_keep(KEYS[1], IP_IDLE_MS, st)
ip_keep(KEYS[3], IP_IDLE_MS)
ip_keep(KEYS[4], IP_IDLE_MS)
return out
