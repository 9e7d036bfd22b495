-- Move dead letters of one partition back to their hosts' queues (and
-- unblock their hosts: requeueing a dropped host's URLs undoes the drop; a
-- host whose robots.txt was unreachable, or refused by the address guard,
-- has it fetched again).
-- (common.lua is prepended: split_fields.)
--
-- The client picks the dead letters (it scans and filters the dead hash by
-- reason and host) and sends them in bounded batches, so no call holds Redis,
-- and with it every worker, for long. Each call is atomic: a URL is either
-- still dead or queued again, never both, and the counts move with it. A
-- fingerprint that is no longer dead (requeued by someone else meanwhile) is
-- skipped, so running two requeues at once cannot queue a URL twice.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix
-- ARGV[2]  the rest, a JSON object by name (scriptargs.requeue_args): front
--          (true: to the front of the queue, score 0; false: in admission
--          order, the same score as admit.lua); concurrency and delay_ms, a
--          host's defaults (only for a host whose hash is gone, which the
--          frontier never does itself)
-- then 2 values per URL (as many URLs as the batch holds: positional):
-- fingerprint (16 bytes, binary), priority of its record
-- Returns {moved, skipped}.
local p, a = ARGV[1], cjson.decode(ARGV[2])
local front = a.front == true

-- A requeued URL starts its attempts afresh: drop meta.retry_times from the
-- record (an entry is a 16-byte fingerprint, then the JSON record).
local function fresh(entry)
  local ok, rec = pcall(cjson.decode, string.sub(entry, 17))
  if not ok or type(rec) ~= 'table' or type(rec.m) ~= 'table' or rec.m.retry_times == nil then
    return entry
  end
  rec.m.retry_times = nil
  if next(rec.m) == nil then rec.m = nil end
  return string.sub(entry, 1, 16) .. cjson.encode(rec)
end
local conc0, delay0 = a.concurrency, a.delay_ms
local seq = num(redis.call('HGET', KEYS[1], N.seq), 0)
local moved, skipped, hosts = 0, 0, 0

for i = 3, #ARGV, 2 do
  local fp, prio = ARGV[i], tonumber(ARGV[i + 1])
  local data = redis.call('HGET', p .. ':dead', fp)
  if not data then
    skipped = skipped + 1
  else
    local host, reason, entry = split_fields(data, 3)  -- host \n reason \n entry
    local hk, sk = p .. ':h:' .. host, site_key(p, host)
    hincr(KEYS[1], N.dead_by .. reason_label(reason), -1)
    local was = redis.call('HMGET', hk, H.blocked, H.parked_reason)
    if was[1] == 'p' then hincr(KEYS[1], N.parked_by .. reason_label(was[2] or ''), -1) end
    hosts = hosts + ensure_host(p, host, conc0, delay0)
    local score = 0
    if not front then
      seq = seq + 1
      score = queue_score(prio, seq)
    end
    redis.call('HDEL', p .. ':dead', fp)
    redis.call('HDEL', hk, H.blocked, H.parked_reason)  -- unblock, unpark
    if redis.call('HGET', hk, H.robots_state) == 'u' then
      -- its robots.txt is fetched again at once (it may be reachable now: a
      -- setting allowed its address, its server came back)
      redis.call('HDEL', hk, H.robots_state, H.robots_wait, H.robots_tries, H.robots_retry)
    end
    -- forget DNS failures
    redis.call('HDEL', sk, S.dns_failures, S.dns_until, S.dns_kind, S.dns_hold)
    if redis.call('HGET', sk, S.breaker) == 'x' then
      redis.call('HDEL', sk, S.breaker, S.failures, S.openings, S.cooldown)
    end
    push_url(p, host, score, fresh(entry))
    moved = moved + 1
  end
end

if moved > 0 then
  hincr(KEYS[1], N.dead, -moved)
  hincr(KEYS[1], N.queued, moved)
  if not front then redis.call('HSET', KEYS[1], N.seq, seq) end
end
if hosts > 0 then hincr(KEYS[1], N.hosts, hosts) end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return {moved, skipped}
