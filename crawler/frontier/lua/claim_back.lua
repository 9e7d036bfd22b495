-- Part of claim.lua (included where it says so): steps 1 to 2b, what comes
-- back to the queues before a claim takes from them. It reads the locals
-- claim.lua set above its include line (p, now, look, move_max, ...).

-- 1. Expired leases go back to their queues. (A member of an older build is
-- the fingerprint alone, its details in PP:ld.)
if look.leased then
local expired = redis.call('ZRANGEBYSCORE', p .. ':leased', '-inf', now, 'LIMIT', 0, move_max)
for _, member in ipairs(expired) do
  redis.call('ZREM', p .. ':leased', member)
  local host, score, _, entry, fp = lease_fields(member)
  if not host then
    fp = member
    local data = redis.call('HGET', p .. ':ld', fp)
    redis.call('HDEL', p .. ':ld', fp)
    if data then host, score, _, entry = split_fields(data, 4) end
  end
  if host then
    local sk = site_key(p, host)
    hincr(sk, S.in_flight, -1)
    domain_lease_ended(p, sk, fp, now)
    push_url(p, host, score, entry)
    refresh_site(p, host)
  end
end
if #expired > 0 then
  moved.leased = moved.leased - #expired
  moved.queued = moved.queued + #expired
  hincr(KEYS[1], N.expired, #expired)
end

end
-- 2. Due delayed URLs go back to their queues.
if look.delayed then
local due = redis.call('ZRANGEBYSCORE', p .. ':delayed', '-inf', now, 'LIMIT', 0, move_max)
for _, fp in ipairs(due) do
  local data = redis.call('HGET', p .. ':dd', fp)
  redis.call('ZREM', p .. ':delayed', fp)
  redis.call('HDEL', p .. ':dd', fp)
  if data then
    local host, score, entry = split_fields(data, 3)
    push_url(p, host, score, entry)
  end
end
if #due > 0 then
  hincr(KEYS[1], N.delayed, -#due)
  moved.queued = moved.queued + #due
end

end
-- 2b. Done URLs whose revisit is due go back to their hosts' queues
-- (FRONTIER_REVISIT_AFTER): PP:vdue holds the hosts with revisits by the
-- earliest one's ms, PP:v:HOST the host's done URLs by when each is due, in
-- seconds (release.lua). Behind
-- the host's new URLs when revisit_new_first (their priority lowered by 2^16),
-- else in their own priority's order; either way first come, first served.
if look.vdue then
local revisit_back = revisit_new_first and 65536 * 4294967296 or 0
local vhosts = redis.call('ZRANGEBYSCORE', p .. ':vdue', '-inf', now, 'LIMIT', 0, move_max)
-- A dropped or parked host's revisits become dead letters, as its new links
-- do (admit.lua): requeueing the host brings them back.
local revisited, revisits_dead = 0, 0
local seq = nil
local vbudget = move_max
for _, host in ipairs(vhosts) do
  if vbudget <= 0 then break end
  local vk = p .. ':v:' .. host
  local entries = redis.call('ZRANGEBYSCORE', vk, '-inf', math.floor(now / 1000), 'LIMIT', 0, vbudget)
  if #entries == 0 then  -- due times in ms: kept by a build before 2026-12-03
    entries = redis.call('ZRANGEBYSCORE', vk, '(100000000000', now, 'LIMIT', 0, vbudget)
  end
  vbudget = vbudget - #entries
  local b = redis.call('HGET', p .. ':h:' .. host, H.blocked)
  local reason = b == 'p' and redis.call('HGET', p .. ':h:' .. host, H.parked_reason)
    or '{"reason": "dropped", "error": "host dropped before its revisit"}'
  seq = seq or num(redis.call('HGET', KEYS[1], N.seq), 0)
  for _, entry in ipairs(entries) do
    redis.call('ZREM', vk, entry)
    if string.find(entry, '"lm":', 17, true) then  -- (admit.lua's bring_forward)
      redis.call('HDEL', p .. ':vm:' .. host, string.sub(entry, 1, 16))
    end
    if b == '1' or b == 'p' then
      dead_letter(KEYS[1], p, string.sub(entry, 1, 16), host, reason, entry)
      revisits_dead = revisits_dead + 1
    else
      seq = seq + 1
      -- (records.py writes the priority "p" right after the depth "d")
      local prio = num(string.match(entry, ',"d":%d+,"p":(-?%d+)', 17), 0)
      push_url(p, host, queue_score(prio, seq) + revisit_back, entry)
      revisited = revisited + 1
    end
  end
  local first = redis.call('ZRANGE', vk, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', p .. ':vdue', host)
  else
    local due = tonumber(first[2])
    redis.call('ZADD', p .. ':vdue', due > 100000000000 and due or due * 1000, host)
  end
end
if revisited + revisits_dead > 0 then
  redis.call('HSET', KEYS[1], N.seq, seq)
  hincr(KEYS[1], N.revisit, -(revisited + revisits_dead))
  hincr(KEYS[1], N.done, -(revisited + revisits_dead))
  moved.queued = moved.queued + revisited
  hincr(KEYS[1], N.dead, revisits_dead)
  hincr(KEYS[1], N.revisited, revisited)
end
end  -- step 2b
