-- Renew leases of one partition that this worker still holds.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] worker id
-- ARGV[3]  the rest, a JSON object by name (scriptargs.renew_args): lease_ms
-- then the leases' members of PP:leased (lease_fields in common.lua; binary,
-- and as many as there are: positional)
-- Returns how many were renewed; the others expired and may now belong to
-- another worker, whose lease is left alone.
local p, worker = ARGV[1], ARGV[2]
local a = cjson.decode(ARGV[3])
local expiry = now_ms() + a.lease_ms
local renewed = 0
for i = 4, #ARGV do
  local host, _, holder, _, fp = lease_fields(ARGV[i])
  if holder == worker and redis.call('ZSCORE', p .. ':leased', ARGV[i]) then
    redis.call('ZADD', p .. ':leased', 'XX', expiry, ARGV[i])
    -- its domain counts it in flight until the same time
    local dom = redis.call('HGET', p .. ':g:' .. site_of(host), S.domain)
    if dom then redis.call('ZADD', p .. ':di:' .. dom, 'XX', expiry, fp) end
    renewed = renewed + 1
  end
end
return renewed
