-- Helpers shared by the frontier's scripts: store.py prepends this file to
-- each script when it loads it (Redis scripts cannot import one another).

-- The server's clock in ms: every worker sees the same time.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A host belongs in its partition's ready set, scored by its next-allowed
-- time, exactly while it has queued URLs and room for one more in flight.
-- The next-allowed time is the later of t (pacing) and w (a hold: robots.txt
-- being fetched or unreachable; later, backoff and breakers).
local function refresh_host(p, host)
  local st = redis.call('HMGET', p .. ':h:' .. host, 'n', 'i', 'c', 't', 'w')
  if tonumber(st[1]) > 0 and tonumber(st[2]) < tonumber(st[3]) then
    redis.call('ZADD', p .. ':ready', math.max(tonumber(st[4]), tonumber(st[5] or '0')), host)
  else
    redis.call('ZREM', p .. ':ready', host)
  end
end

-- Queue order: higher priority first, then first come first served; the
-- partition's sequence number breaks ties (a double holds both exactly).
local function queue_score(prio, seq)
  return -tonumber(prio) * 4294967296 + seq % 4294967296
end

-- Put an entry in its host's queue and keep the ready set right.
local function push_url(p, host, score, entry)
  redis.call('ZADD', p .. ':q:' .. host, score, entry)
  redis.call('HINCRBY', p .. ':h:' .. host, 'n', 1)
  refresh_host(p, host)
end

-- Split "f1 \n f2 \n ... \n rest" into n fields; the last one keeps any
-- newlines (an entry starts with a binary fingerprint).
local function split_fields(data, n)
  local out, pos = {}, 1
  for _ = 1, n - 1 do
    local cut = string.find(data, '\n', pos, true)
    out[#out + 1] = string.sub(data, pos, cut - 1)
    pos = cut + 1
  end
  out[#out + 1] = string.sub(data, pos)
  return unpack(out)
end

-- Hold a host back until until_ms (server time); a hold only ever grows (the
-- later end wins). Two fields because claims and starts are gated apart: w
-- keeps the host out of the ready set (no claims, see refresh_host) and bk
-- keeps URLs claimed before the hold from starting (read by start.lua).
local function hold_host(hk, until_ms)
  local st = redis.call('HMGET', hk, 'w', 'bk')
  if until_ms > tonumber(st[1] or '0') then redis.call('HSET', hk, 'w', until_ms) end
  if until_ms > tonumber(st[2] or '0') then redis.call('HSET', hk, 'bk', until_ms) end
end
