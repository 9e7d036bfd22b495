-- Hosts new to an IP address (their names were just resolved, before their
-- first claim: the DNS job, claim.lua), parked by a claim behind others of
-- the address ("W"), or parked hosts whose own time came (a wake may have
-- been lost): each may go now, with a place reserved at the address, or
-- waits in its queue, first come first served (a host already in the queue
-- keeps its place, and goes if that place is at the front and there is room).
-- So a thousand names on one server meet its limit here, once each, instead
-- of each being claimed, refused at the gate and given back.
--
-- KEYS     as ipgate.lua: the gate hash, the requests in flight, the waiting
--          hosts, the reservations
-- ARGV[1]  concurrency (0: no limit), ARGV[2] how long (ms) a reservation
--          holds, then the hosts ("P\nHOST")
-- Returns, per host, 1: it may go (reserved), 0: it waits in the queue.
local now = now_ms()
local st = redis.call('HMGET', KEYS[1], 's', 'wk', 'xc', 'xd', 'xp')
local conc = tonumber(st[3] or ARGV[1])
local out = {}
local room = 1000000000
local head = {}  -- the queue's first hosts, those the address has room for
if st[5] then
  room = 0  -- paused: everyone waits for the resume
elseif conc > 0 then
  room = math.max(ip_room(KEYS[2], KEYS[4], conc, now), 0)
  if room > 0 then
    for _, w in ipairs(redis.call('ZRANGE', KEYS[3], 0, room - 1)) do head[w] = true end
  end
end
local function reserve(w)
  if conc > 0 then redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), w) end
  room = room - 1
end
for i = 3, #ARGV do
  local w = ARGV[i]
  if head[w] then
    -- Already waiting, and at the front: its turn (its wake was lost).
    redis.call('ZREM', KEYS[3], w)
    reserve(w)
    out[#out + 1] = 1
  elseif room > 0 and redis.call('EXISTS', KEYS[3]) == 0 then
    reserve(w)  -- nobody waits: it may go
    out[#out + 1] = 1
  else
    redis.call('ZADD', KEYS[3], 'NX', hincr(KEYS[1], 'qn', 1), w)
    out[#out + 1] = 0
  end
end
ip_keep(KEYS[1], IP_IDLE_MS, st)
ip_keep(KEYS[3], IP_IDLE_MS)
ip_keep(KEYS[4], IP_IDLE_MS)
return out
