-- Release leases of one partition: each exactly once, whatever happened.
--
-- A lease that is no longer held (it expired and went back to its queue, or
-- was released already) is left alone and counted as stale, so a late or
-- repeated release can never double-count or resurrect a URL.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] worker id (only its own leases are released)
-- then 4 values per lease: fingerprint (16 bytes), op, arg, entry
--   op "done":   the URL is finished (arg "robots": robots.txt disallowed it)
--   op "return": back to the head of its host's queue (graceful stop)
--   op "retry":  delayed by arg ms, with entry as its new record (if not "")
--   op "dead":   dead letter; arg is the JSON reason
-- Returns {released, stale}.
local p, worker = ARGV[1], ARGV[2]
local now = now_ms()
local released, stale = 0, 0
local counts = {done = 0, queued = 0, delayed = 0, dead = 0, robots_denied = 0}

for i = 3, #ARGV, 4 do
  local fp, op, arg, new_entry = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local data = redis.call('HGET', p .. ':ld', fp)
  local host, score, holder, entry
  if data then host, score, holder, entry = split_fields(data, 4) end
  if data and holder == worker then
    redis.call('ZREM', p .. ':leased', fp)
    redis.call('HDEL', p .. ':ld', fp)
    if new_entry ~= '' then entry = new_entry end
    local hk = p .. ':h:' .. host
    redis.call('HINCRBY', hk, 'i', -1)
    if op == 'done' then
      counts.done = counts.done + 1
      if arg == 'robots' then counts.robots_denied = counts.robots_denied + 1 end
    elseif op == 'return' then
      redis.call('ZADD', p .. ':q:' .. host, score, entry)
      redis.call('HINCRBY', hk, 'n', 1)
      counts.queued = counts.queued + 1
    elseif op == 'retry' then
      redis.call('ZADD', p .. ':delayed', now + tonumber(arg), fp)
      redis.call('HSET', p .. ':dd', fp, host .. '\n' .. score .. '\n' .. entry)
      counts.delayed = counts.delayed + 1
    else
      redis.call('HSET', p .. ':dead', fp, host .. '\n' .. arg .. '\n' .. entry)
      counts.dead = counts.dead + 1
    end
    refresh_host(p, host)
    released = released + 1
  else
    stale = stale + 1
  end
end

if released > 0 then redis.call('HINCRBY', KEYS[1], 'leased', -released) end
for name, n in pairs(counts) do
  if n > 0 then redis.call('HINCRBY', KEYS[1], name, n) end
end
if stale > 0 then redis.call('HINCRBY', KEYS[1], 'stale', stale) end
return {released, stale}
