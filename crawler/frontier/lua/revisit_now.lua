-- Make done URLs due for their revisit now (scrapy frontier revisit-now): an
-- operator's "crawl it again", for one host or every host of a partition.
--
-- Each call moves at most batch hosts (their revisits' due times all set to
-- 0, so claim.lua queues them at its next look, move_max at a time), so a
-- partition of a hundred thousand hosts never holds Redis for long; the
-- caller calls again until it returns 0 hosts left.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix
-- ARGV[2]  the rest, a JSON object by name (scriptargs.revisit_now_args): host,
--          the host key (left out: every host), batch, hosts a call
-- Returns {hosts moved, URLs made due, hosts left}.
local p, a = ARGV[1], cjson.decode(ARGV[2])
local only, batch = a.host or '', a.batch
local vdue = p .. ':vdue'
local hosts
if only ~= '' then
  hosts = redis.call('ZSCORE', vdue, only) and {only} or {}
else
  hosts = redis.call('ZRANGEBYSCORE', vdue, '(0', '+inf', 'LIMIT', 0, batch)
end
local urls = 0
for _, host in ipairs(hosts) do
  local vk = p .. ':v:' .. host
  -- every score to 0: the union of the set with itself, weighted 0
  urls = urls + redis.call('ZUNIONSTORE', vk, 1, vk, 'WEIGHTS', 0)
  redis.call('ZADD', vdue, 0, host)
end
if #hosts > 0 then timer_at(p, 0, 'vdue') end
local left = 0
if only == '' then left = redis.call('ZCOUNT', vdue, '(0', '+inf') end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return {#hosts, urls, left}
