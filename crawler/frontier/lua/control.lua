-- Live control: an operator's override of one site's, domain's or server
-- address's limits
-- (`scrapy frontier host`), in force for every worker from their next claim
-- or start, and until it is reset. The overrides are fields of the record
-- (xc concurrency, xd delay ms, xp paused: common.lua reads them), so they
-- survive restarts and leave the automatic values (settings, robots.txt,
-- holds) untouched underneath.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition), or
--          for an address its gate hash ({ns/ip/ADDR}:g, a slot of its own)
-- ARGV[1]  prefix, ARGV[2] "site", "domain" or "ip", ARGV[3] the site's name,
--          the domain or the address
-- ARGV[4]  concurrency, ARGV[5] delay ms: '' leaves it, '-' returns it to automatic
-- ARGV[6]  '1' pause, '0' resume, '' leaves it; ARGV[7] '1': every override off first
-- ARGV[8..10] a site's budget of pages, bytes and ms (qp, qb, qs: common.lua
--          budget_left; 0: no limit), each '' to leave it. A site whose
--          budget this changes takes new links again (its hosts' "q" mark
--          goes: admit.lua); its dead letters wait for a requeue.
-- Returns 1, or 0 when the frontier has no such site.
local p, scope, name = ARGV[1], ARGV[2], ARGV[3]
local key = p .. (scope == 'site' and ':g:' or ':d:') .. name
if scope == 'ip' then key = KEYS[1] end
if scope == 'site' and redis.call('EXISTS', key) == 0 then return 0 end
local now = now_ms()

if ARGV[7] == '1' then redis.call('HDEL', key, 'xc', 'xd', 'xp', 'qp', 'qb', 'qs') end
local function set(field, value)
  if value == '-' then
    redis.call('HDEL', key, field)
  elseif value ~= '' then
    redis.call('HSET', key, field, value)
  end
end
set('xc', ARGV[4])
set('xd', ARGV[5])
local budget = false
for j, field in ipairs({'qp', 'qb', 'qs'}) do
  local value = ARGV[7 + j] or ''
  set(field, value)
  budget = budget or value ~= ''
end
if scope == 'site' and (budget or ARGV[7] == '1') then
  redis.call('HDEL', key, 'bj')
  for _, host in ipairs(redis.call('SMEMBERS', p .. ':ga:' .. name)) do
    local hk = p .. ':h:' .. host
    if redis.call('HGET', hk, 'b') == 'q' then redis.call('HDEL', hk, 'b', 'pr') end
  end
end
if ARGV[6] == '1' then
  redis.call('HSET', key, 'xp', 1)
elseif ARGV[6] == '0' then
  redis.call('HDEL', key, 'xp')
end

-- A shorter delay applies now, not after the turn the longer one gave out.
local delay = tonumber(ARGV[5])
if delay then
  local st = redis.call('HMGET', key, 't', 's')
  if num(st[1], 0) > now + delay then redis.call('HSET', key, 't', now + delay) end
  if num(st[2], 0) > now + delay then redis.call('HSET', key, 's', now + delay) end
end

if scope == 'site' then
  refresh_site(p, name)
elseif scope == 'domain' then
  -- a site alone in the domain is gated by the domain from now on
  local alone = redis.call('HGET', key, 'fs')
  if alone then redis.call('HDEL', p .. ':g:' .. alone, 'd1') end
  wake_domain(p, name, now)
elseif redis.call('HLEN', key) > 0 then
  -- An address's gate is forgotten after an hour unused (ipgate.lua), but not
  -- while an operator's override is on it. Its parked hosts are woken by the
  -- caller (control.py), in their partitions.
  if redis.call('HEXISTS', key, 'xc') + redis.call('HEXISTS', key, 'xd')
      + redis.call('HEXISTS', key, 'xp') > 0 then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIRE', key, 3600000)
  end
end
if scope ~= 'ip' then wake_sleepers(p) end  -- (common.lua: workers waiting here)
return 1
