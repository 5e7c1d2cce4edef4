"""Texts per script for the token estimate: a tuning half and a reporting half.

Written for this project: customer-service chat, notes and code of the kind the package's
users keep in a conversation, short (one line) and long (a few paragraphs) in each script.
The estimate's per-script rates (``langgraph_memory_plus.messages.tokens``) were set on
the ``tuning`` texts (with ``language_samples.py``, which tuned the earlier estimate);
the ``reporting`` texts were written afterwards and were not looked at while setting
them. ``python -m benchmarks.token_budgets`` reports the estimate's error on the
reporting half, and ``tests/test_token_budgets.py`` holds it to "never under-count" there.
The first check on the reporting half found three under-counts (letters and digits run
together); the estimate then gained a rule from the tokenizers' pre-tokenization (a
letter after a digit and a space before one start a token) rather than new rates: see
``benchmarks/results/2026-12-06-token-budgets.md``.
"""

from __future__ import annotations

from benchmarks.data.language_samples import SAMPLES

ZH_TUNING = [
    *SAMPLES["zh"],
    "好的",
    "请问行李额是多少？",
    "您好，我是您的专属客服小美，很高兴为您服务。请问有什么可以帮您？",
    "乘客信息：张三，身份证号110101199003071234，手机13800138000，常旅客卡号CA123456789。",
    "我上周三在你们的APP上买了一台扫地机器人，订单号是JD20261128093512，到现在还没发货。"
    "客服说仓库缺货，要等十天，可是下单的时候页面上明明写着现货、当天发。我想问一下，"
    "如果我现在取消订单，退款多久能到账？用的是信用卡分期，分期的手续费会不会一起退？"
    "另外，如果我不取消，能不能给我一点补偿，比如优惠券或者延长保修？",
    "饕餮、魑魅魍魉、耄耋、龃龉、罄竹难书、醍醐灌顶、觊觎、踟蹰、缱绻、旖旎。",
    "【系统通知】您的账户于2026年11月30日 23:59:59 登录异常，IP：203.0.113.42，"
    "如非本人操作，请立即修改密码！！！",
]
ZH_REPORTING = [
    "谢谢",
    "能帮我查一下CZ3101明天早上几点起飞吗？",
    "我想把回程改到下周五，最好是下午的航班，差价我可以补。",
    "患者主诉：反复咳嗽、咳痰两周，伴低热，夜间明显。既往有高血压病史五年，规律服用氨氯地平。"
    "查体：体温37.8℃，双肺呼吸音粗，右下肺可闻及少量湿啰音。建议：血常规、胸部CT，"
    "必要时加做痰培养；暂予阿莫西林克拉维酸钾口服，三天后复诊。",
    "您好！关于您反映的问题，我们已经记录在案（工单号：TK-2026-004517）。技术同事会在"
    "24小时内联系您。在此期间，您可以尝试：1）清除浏览器缓存；2）更换网络环境；"
    "3）使用最新版本的客户端。如问题仍未解决，请回复本邮件，我们将第一时间跟进。",
    "昨天晚上下了一场大雨，小区门口的路又积水了。物业说排水管道老化，要等街道统一改造，"
    "可是已经拖了两年。住在一楼的王阿姨家里进了水，地板都泡坏了。大家在业主群里商量，"
    "准备联名给街道办写一封信，请他们尽快安排施工，也希望物业先临时加一台抽水泵。",
    "鳜鱼、鲥鱼、鲟鱼和鳙鱼都是长江里的鱼；餮、夔、饕、麒麟、貔貅则是传说中的神兽。",
]

JA_TUNING = [
    *SAMPLES["ja"],
    "はい",
    "予約番号を教えていただけますか？",
    "お問い合わせいただき、誠にありがとうございます。担当の佐藤が確認いたしますので、"
    "今しばらくお待ちくださいませ。",
    "先月購入したノートパソコンの電源が突然入らなくなりました。保証期間内なので無償で"
    "修理していただけると思うのですが、どこに送ればよいでしょうか。また、修理の間に"
    "代わりの機械を貸していただくことはできますか。仕事で毎日使っているので、とても困っています。",
    "薔薇、檸檬、蒟蒻、鬱蒼、躊躇、顰蹙、齟齬、魑魅魍魎、麒麟、葡萄。",
    "ｶﾀｶﾅの半角文字と、ＡＢＣの全角英字、そして１２３の全角数字が混ざった文。",
]
JA_REPORTING = [
    "ありがとうございます",
    "明日の会議は何時からですか？",
    "窓側の席を希望します。できれば前方の席がいいです。",
    "東京駅から新大阪駅まで、新幹線のぞみ号で約二時間半かかります。指定席は事前に"
    "インターネットで予約でき、変更も発車前なら何度でも無料です。ただし、年末年始や"
    "お盆の時期は大変混雑しますので、早めのご予約をおすすめします。",
    "ご注文の商品（注文番号：A-20261204-0081）は、本日発送いたしました。お届け予定日は"
    "十二月六日（土）です。配送状況は下記のリンクからご確認いただけます。",
    "猫が好きで、週末はよく近所の保護猫カフェに行きます。最近、キジトラの子猫を譲渡して"
    "もらうことになりました。名前はまだ決めていませんが、家族はみんな楽しみにしています。",
    "鰻重、鰹節、鯖の味噌煮、鱈子、鮪の刺身、鰤大根。",
]

KO_TUNING = [
    "네",
    "안녕하세요, 무엇을 도와드릴까요?",
    "주문하신 상품은 내일 오후에 도착할 예정입니다. 배송 조회는 마이페이지에서 하실 수 있습니다.",
    "지난주에 예약한 호텔을 취소하고 싶은데, 환불 규정이 어떻게 되나요? 체크인까지 아직 "
    "열흘 정도 남았고, 결제는 신용카드로 했습니다. 혹시 수수료가 있다면 얼마인지도 "
    "알려 주세요. 그리고 같은 날짜로 다른 지점에 다시 예약할 수 있는지도 궁금합니다.",
    "회원번호 KR-2026-55871, 연락처 010-1234-5678, 이메일 minsu.kim@example.com",
    "똠얌꿍, 쌀국수, 뷁, 꽥, 쀍, 홧병, 읊조리다, 넋두리, 곬, 닭갈비.",
    "서울특별시 강남구 테헤란로 123, 4층 (역삼동)",
]
KO_REPORTING = [
    "감사합니다",
    "창가 자리로 바꿔 주실 수 있나요?",
    "저는 매번 비행기를 탈 때 통로 쪽 좌석을 선호합니다.",
    "고객님의 소중한 의견에 감사드립니다. 말씀하신 배송 지연 문제는 택배사의 물량 증가로 "
    "인해 발생하였으며, 현재는 정상적으로 처리되고 있습니다. 불편을 드려 죄송하며, 사과의 "
    "의미로 다음 주문 시 사용하실 수 있는 5,000원 할인 쿠폰을 발급해 드렸습니다.",
    "어제 친구들과 한강 공원에 가서 치킨을 먹었어요. 날씨가 조금 추웠지만 야경이 정말 "
    "예뻤고, 오랜만에 이야기를 많이 나눠서 즐거웠습니다. 다음 달에는 다 같이 부산에 "
    "여행을 가기로 했는데, 기차표를 미리 예매해야 할 것 같아요.",
    "예약 번호 HX7K2P, 출발 2026년 12월 24일 09:40, 인천(ICN) → 도쿄(NRT)",
    "괜찮아요, 천천히 하셔도 돼요 ㅎㅎ",
]

EN_TUNING = [
    *SAMPLES["en"],
    "ok",
    "Thanks!",
    "Can you move my flight to Friday?",
    "Supercalifragilisticexpialidocious, antidisestablishmentarianism, "
    "pneumonoultramicroscopicsilicovolcanoconiosis and floccinaucinihilipilification.",
    "Ref: XK9-22B/Q7; ETA 14:05 UTC; contact j.doe+support@example.org or +44 20 7946 0958.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG. PLEASE REFUND ORDER NOW!",
    "I've been a member since 2014 and I've never had an issue like this. The app keeps "
    "logging me out every few minutes, I can't check in online, and when I called the "
    "hotline I was on hold for forty-five minutes before the call dropped. Please escalate.",
]
EN_REPORTING = [
    "yes",
    "What time does boarding start?",
    "I'd prefer an aisle seat near the front, please.",
    "Dear customer, we're sorry for the delay. Your refund of 249.00 EUR was issued on "
    "3 December and should reach your account within 5-7 business days, depending on "
    "your bank. If it has not arrived by then, reply to this message with your booking "
    "reference and we will look into it right away.",
    "The quarterly report shows revenue up 12% year over year, driven mostly by the new "
    "subscription tier, while churn fell from 4.1% to 3.6%. Operating costs rose because "
    "of the data-centre migration, which should finish in Q2. Next steps: hire two support "
    "engineers in Dublin, renegotiate the CDN contract and ship the offline mode.",
    "Tracking: 1Z999AA10123456784 (UPS), order #A-77310, SKU WX-4410-BLK, qty 2.",
    "URGENT: PLEASE CALL ME BACK ASAP ABOUT BOOKING HX7K2P, THE FLIGHT LEAVES AT 6 AM!!",
    "Honestly, I'm not sure—could you double-check? It's urgent :)",
]

CODE_TUNING = [
    *SAMPLES["code"],
    "x = 1",
    "def add(a: int, b: int) -> int:\n    return a + b\n",
    "for (let i = 0; i < items.length; i++) {\n    if (items[i].id === target) {\n"
    "        return items[i];\n    }\n}\nreturn null;\n",
    "SELECT u.id, u.email, COUNT(o.id) AS orders\nFROM users u\nLEFT JOIN orders o ON "
    "o.user_id = u.id\nWHERE u.created_at >= '2026-01-01'\nGROUP BY u.id, u.email\n"
    "HAVING COUNT(o.id) > 3\nORDER BY orders DESC;\n",
    '{"id": 42, "name": "Ada", "tags": ["vip", "beta"], "balance": 1024.5, '
    '"address": {"city": "London", "zip": "EC1A 1BB"}, "active": true}',
    # random strings, set apart from words: base64 of random bytes, a JWT, an API key
    "qB0KkSgAWn6J3bqJJ9D6x7DKfMhVP/5oll77plYBxf1Gb9W+av2DEnjsl+creJpoVVoger/eCMKy+leB"
    "KzLoa3K1S0dcK/KNj5cBmR6ZEf4owDyZ0sBfiqVmRpDm2zZZOUDtnpvmEFfEKBunff18tjHYuUi4t504"
    "7tfV1swuULVUDyaAJEo75DL7CgrYINrPV8c3/XjUAngNWljB4MuPSCnQvgbZWQKipURhNv4rwnYqmEsJ"
    "cFKgl67IiASdyfjZTcQr5R6mDltW6uxsrUogTm/UqMsywK9b3IQ35IGcvT++FSQpZvnzrrM3kJW3u3Ac",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9l"
    "IiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "sk-proj-Xa9bT3kLmQ2vN8pR5sW1yZ4cF7gH0jK6",
    "el.getElementById('cart').addEventListener('click', onClick); xhr = new XMLHttpRequest();",
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in ./logs/*.log; do\n"
    '  gzip -9 "$f" && mv "$f.gz" /var/archive/\ndone\n',
]
CODE_REPORTING = [
    "import os",
    'if err != nil {\n\treturn fmt.Errorf("open %s: %w", path, err)\n}\n',
    "class Cache:\n    def __init__(self, size: int = 128) -> None:\n"
    "        self._data: dict[str, bytes] = {}\n        self._size = size\n\n"
    "    def get(self, key: str) -> bytes | None:\n        return self._data.get(key)\n",
    "const total = cart.items\n  .filter((item) => item.qty > 0)\n"
    "  .map((item) => item.price * item.qty)\n  .reduce((sum, x) => sum + x, 0);\n"
    "console.log(`Total: ${total.toFixed(2)}`);\n",
    '<div class="card">\n  <h2>{{ title }}</h2>\n  <ul>\n'
    '    {% for row in rows %}<li data-id="{{ row.id }}">{{ row.name }}</li>{% endfor %}\n'
    "  </ul>\n</div>\n",
    "fn main() {\n    let v: Vec<u32> = (1..=10).map(|x| x * x).collect();\n"
    '    println!("{:?}", v);\n}\n',
    "Authorization: Bearer ghp_16C7e42F292c6912E7710c838347Ae178B4a\n"
    "X-Request-Id: 5f2b9c1e-8d4a-4e7b-b0c3-2a9f61d8e7aa\n",
    "data:image/png;base64,4Rr/X1Q+0n/vPfL5RZMVeQqxgAFnz7+dOCGYK8fzgnT6AIhCNn46UgP2yK+Mr7w7",
    "0x1F, 0x8B, 0x08, 0x00, 0xFF, 0x7A, 0x3C, 0x9E, 1234567890, 3.14159265358979",
]

MIXED_TUNING = [
    *SAMPLES["mixed"],
    "OK，收到👌",
    "请把 config.yaml 里的 max_tokens 改成 2000，然后重启 service。",
    "我的邮箱是 wang.fang@example.com，护照号 E12345678，航班 MU5101（PVG→PEK）。",
    "🎉🎉🎉 生日快乐！Happy birthday! お誕生日おめでとう！생일 축하해요! 🎂🥳",
    "報錯信息：TypeError: 'NoneType' object is not subscriptable，在第 42 行。",
]
MIXED_REPORTING = [
    "好的👍",
    "帮我把 iPhone 15 Pro 的订单改成 256GB 的，颜色要 Natural Titanium。",
    "会议纪要（Meeting notes）：1. Q1 OKR 已对齐；2. API v2 上线时间定在 1/15；"
    "3. 日本市場向けのローカライズは田中さんが担当；4. 한국어 번역은 다음 주까지。",
    "用户反馈：App 在 Android 14 上闪退，log 显示 java.lang.NullPointerException at "
    "com.example.app.MainActivity.onCreate(MainActivity.java:57)，复现率约 30%。",
    "😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩😘",
    "价格：¥1,299.00（原价 ¥1,599.00），限时 8.1 折，截止 2026-12-31 23:59。",
    "Привет! Ça va? ¿Qué tal? Γειά σου! مرحبا — 你好！",  # noqa: RUF001 (Greek on purpose)
]

CORPUS: dict[str, dict[str, list[str]]] = {
    "zh": {"tuning": ZH_TUNING, "reporting": ZH_REPORTING},
    "ja": {"tuning": JA_TUNING, "reporting": JA_REPORTING},
    "ko": {"tuning": KO_TUNING, "reporting": KO_REPORTING},
    "en": {"tuning": EN_TUNING, "reporting": EN_REPORTING},
    "code": {"tuning": CODE_TUNING, "reporting": CODE_REPORTING},
    "mixed": {"tuning": MIXED_TUNING, "reporting": MIXED_REPORTING},
}
"""Texts by script, then by half (``"tuning"``, ``"reporting"``)."""
