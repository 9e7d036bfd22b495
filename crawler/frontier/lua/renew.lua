-- Renew leases of one partition that this worker still holds.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] worker id, ARGV[3] lease ms, then fingerprints
-- Returns how many were renewed; the others expired and may now belong to
-- another worker, whose lease is left alone.
local p, worker = ARGV[1], ARGV[2]
local expiry = now_ms() + tonumber(ARGV[3])
local renewed = 0
local tag = '\n' .. worker .. '\n'
for i = 4, #ARGV do
  local data = redis.call('HGET', p .. ':ld', ARGV[i])
  if data then
    local a = string.find(data, '\n', 1, true)
    local b = string.find(data, '\n', a + 1, true)
    if string.sub(data, b, b + #tag - 1) == tag then
      redis.call('ZADD', p .. ':leased', 'XX', expiry, ARGV[i])
      -- its domain counts it in flight until the same time
      local dom = redis.call('HGET', p .. ':g:' .. site_of(string.sub(data, 1, a - 1)), 'd')
      if dom then redis.call('ZADD', p .. ':di:' .. dom, 'XX', expiry, ARGV[i]) end
      renewed = renewed + 1
    end
  end
end
return renewed
