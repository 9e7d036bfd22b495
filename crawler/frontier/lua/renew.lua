-- Renew leases of one partition that this worker still holds.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] worker id, ARGV[3] lease ms, then the leases'
--          members of PP:leased (lease_fields in common.lua)
-- Returns how many were renewed; the others expired and may now belong to
-- another worker, whose lease is left alone.
local p, worker = ARGV[1], ARGV[2]
local expiry = now_ms() + tonumber(ARGV[3])
local renewed = 0
for i = 4, #ARGV do
  local host, _, holder, _, fp = lease_fields(ARGV[i])
  if holder == worker and redis.call('ZSCORE', p .. ':leased', ARGV[i]) then
    redis.call('ZADD', p .. ':leased', 'XX', expiry, ARGV[i])
    -- its domain counts it in flight until the same time
    local dom = redis.call('HGET', p .. ':g:' .. site_of(host), 'd')
    if dom then redis.call('ZADD', p .. ':di:' .. dom, 'XX', expiry, fp) end
    renewed = renewed + 1
  end
end
return renewed
