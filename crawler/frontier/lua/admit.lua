-- Admit URLs into one partition: dedup, per-host budget and push, atomically.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  the partition prefix "{ns/pN}"
-- ARGV[2]  default per-host concurrency
-- ARGV[3]  default per-host delay, ms
-- ARGV[4]  per-host budget of admitted URLs (0: none)
-- then 6 values per URL:
--   seen bucket, seen member (int64 as text), host key, priority,
--   entry (16-byte fingerprint .. JSON record), host config ("" or "conc:delay_ms")
-- Returns {added, duplicates, refused}.
local p = ARGV[1]
local conc0, delay0, budget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local added, dups, refused, hosts = 0, 0, 0, 0
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')

for i = 5, #ARGV, 6 do
  local bucket, member, host, prio, entry, conf =
    ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local hk = p .. ':h:' .. host
  if redis.call('SADD', p .. ':s:' .. bucket, member) == 0 then
    dups = dups + 1
  else
    if redis.call('EXISTS', hk) == 0 then
      local c, d = conc0, delay0
      if conf ~= '' then
        local a, b = string.match(conf, '^(%d+):(%d+)$')
        c, d = tonumber(a), tonumber(b)
      end
      redis.call('HSET', hk, 'n', 0, 'i', 0, 't', 0, 'a', 0, 'c', c, 'dl', d)
      hosts = hosts + 1
    end
    if budget > 0 and tonumber(redis.call('HGET', hk, 'a')) >= budget then
      refused = refused + 1
    else
      seq = seq + 1
      redis.call('HINCRBY', hk, 'a', 1)
      push_url(p, host, queue_score(prio, seq), entry)
      added = added + 1
    end
  end
end

if added > 0 then
  redis.call('HINCRBY', KEYS[1], 'queued', added)
  redis.call('HSET', KEYS[1], 'seq', seq)
end
if dups > 0 then redis.call('HINCRBY', KEYS[1], 'dup', dups) end
if refused > 0 then redis.call('HINCRBY', KEYS[1], 'refused', refused) end
if hosts > 0 then redis.call('HINCRBY', KEYS[1], 'hosts', hosts) end
return {added, dups, refused}
