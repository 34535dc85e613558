--[[
  take_token: take an operation's tokens from a caller's bucket.

  KEYS[1]  bucket      HASH  tokens=tokens left (decimal, below zero while in debt)
                             at=when counted, ms  request=id of the last request
                             granted=how many of its admissions were granted
  ARGV[1]  rate        decimal: tokens added per second
  ARGV[2]  burst       int: the most tokens the bucket holds
  ARGV[3]  request_id  string: the same id sent again (a retried call) gets the same answer
                       and takes nothing a second time
  ARGV[4]  cost        int >= 1: tokens taken when granted
  ARGV[5]  owed        0|1: 0 for an operation's admission, granted only while a token is
                       there; 1 for the rest of an admitted operation's cost, always taken,
                       the bucket going below zero if need be (a debt that the rate pays
                       back before the caller's next operation is admitted)
  ARGV[6]  admissions  int 1..1000: operations admitted at once, in turn, each granted
                       while a token is there, as that many calls made at the same moment
                       would be (1 when owed)
  Returns  {granted, retry_after_ms}: granted is how many of the admissions were granted
           (the first ones; 0 or 1 when owed), retry_after_ms is 0 when all were
  The bucket expires once it would be full again, so idle callers cost no memory.
]]
--- @include "clock"
local bucket_key = KEYS[1]
local rate, burst, request_id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local cost, owed, admissions = tonumber(ARGV[4]), ARGV[5] == '1', tonumber(ARGV[6])

local now = now_ms()
local tokens, at, last_request, last_granted =
  unpack(redis.call('HMGET', bucket_key, 'tokens', 'at', 'request', 'granted'))
tokens, at = tonumber(tokens) or burst, tonumber(at) or now
local function wait_ms(left) return math.ceil((1 - left) * 1000 / rate) end
if last_request == request_id then
  last_granted = tonumber(last_granted)
  if last_granted >= admissions then return {last_granted, 0} end
  return {last_granted, wait_ms(tokens)}
end

-- A clock that stepped back adds nothing, rather than taking tokens away.
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local granted = 0
if owed then
  tokens = tokens - cost
  granted = 1
else
  while granted < admissions and tokens >= 1 do
    tokens = tokens - cost
    granted = granted + 1
  end
end
redis.call('HSET', bucket_key, 'tokens', string.format('%.6f', tokens), 'at', now,
  'request', request_id, 'granted', granted)
redis.call('PEXPIRE', bucket_key, math.ceil((burst - tokens) * 1000 / rate) + 1000)
if granted >= admissions then return {granted, 0} end
return {granted, wait_ms(tokens)}
