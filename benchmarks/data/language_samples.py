"""Calibration texts for the token counter, per language (written for this project).

Customer-service prose of the kind the package's users keep in memory, plus code. The
language benchmark compares counters on these against exact tokenizer counts, and the
tests hold the default counter to its documented accuracy on them.
"""

from __future__ import annotations

EN = [
    "Hello, I booked a flight from London to Singapore for the 14th of March and I would "
    "like to change my seat. I prefer a window seat, and if possible somewhere near the "
    "front of the cabin, because I have a tight connection in Singapore.",
    "Thank you for contacting customer support. I can see your booking reference ABX42K. "
    "Your flight departs at 09:35 from Terminal 2. Would you like me to check whether an "
    "upgrade to business class is available on this route?",
    "My card was charged twice for the same order last Tuesday. The amount was 129.99 "
    "dollars each time. Could you please refund the duplicate payment to the original card "
    "and send me a confirmation email when it is done?",
    "I am sorry to hear that your parcel arrived damaged. To open a claim I need a photo of "
    "the box and of the item, the order number, and the date of delivery. Once we have "
    "those, the replacement usually ships within two working days.",
    "Our opening hours are Monday to Friday from eight in the morning until six in the "
    "evening, and Saturday from nine until one. Outside these hours you can still reach us "
    "through the chat, and an agent will get back to you the next working day.",
    "The new savings account pays 3.2 percent interest per year, calculated daily and paid "
    "monthly. There is no minimum balance, but withdrawals above 5,000 in a single day need "
    "to be confirmed with the code we send to your registered phone number.",
    "Please note that the baggage allowance for economy class on long-haul flights is one "
    "checked bag of up to 23 kilograms, plus one piece of hand luggage and a small personal "
    "item such as a handbag or a laptop bag.",
    "I have been waiting for the technician since eight o'clock this morning and nobody has "
    "shown up. This is the second time this month. I want to know exactly when someone "
    "will come, and I expect some compensation for the day I have lost.",
]

ZH = [
    "您好，我在三月十四日订了一张从北京飞往新加坡的机票，想把座位换到靠窗的位置。如果可以的话，"
    "最好靠前一点，因为我在新加坡转机的时间比较紧。",
    "感谢您联系客服。我已经查到您的订单，订单号是ABX42K。您的航班上午九点三十五分从二号航站楼"
    "出发。请问需要我帮您查一下这条航线是否可以升级到商务舱吗？",
    "上周二我的信用卡因为同一个订单被扣了两次款，每次都是一百二十九元九角九分。麻烦您把重复扣的"
    "钱退回原来的卡上，处理好以后给我发一封确认邮件。",
    "很抱歉听到您的包裹在运输途中损坏了。办理理赔需要您提供包装盒和商品的照片、订单号以及签收日期。"
    "资料齐全后，补发的商品一般会在两个工作日内寄出。",
    "我们的营业时间是周一到周五早上八点到晚上六点，周六上午九点到下午一点。其他时间您也可以通过"
    "在线客服留言，客服人员会在下一个工作日回复您。",
    "新开的储蓄账户年利率为百分之三点二，按日计息，按月付息。没有最低余额要求，但是单日取款超过"
    "五千元时，需要输入我们发送到您预留手机号上的验证码进行确认。",
    "请注意，长途航线经济舱的免费行李额为一件二十三公斤以内的托运行李，另外可以携带一件手提行李"
    "和一件小件随身物品，比如手提包或者电脑包。",
    "我从今天早上八点就开始等维修师傅，到现在还没有人来。这已经是这个月第二次了。我想知道到底"
    "什么时候能有人上门，而且我希望你们能对我耽误的这一天给予一定的补偿。",
]

JA = [
    "こんにちは。三月十四日に東京からシンガポールへの航空券を予約しましたが、座席を窓側に変更"
    "したいです。できれば前方の席をお願いします。シンガポールでの乗り継ぎ時間が短いためです。",
    "お問い合わせいただきありがとうございます。ご予約番号ABX42Kを確認いたしました。"
    "お客様の便は午前九時三十五分に第二ターミナルから出発いたします。"
    "ビジネスクラスへのアップグレードが可能かお調べしましょうか。",
    "先週の火曜日に同じ注文でクレジットカードに二回請求されました。金額はそれぞれ一万二千九百円"
    "です。重複した分を元のカードに返金していただき、完了したら確認メールを送ってください。",
    "お荷物が破損した状態で届いたとのこと、大変申し訳ございません。補償の手続きには、箱と商品の"
    "写真、注文番号、お届け日が必要です。書類がそろいましたら、通常二営業日以内に代替品を発送いたします。",
    "営業時間は月曜日から金曜日の午前八時から午後六時まで、土曜日は午前九時から午後一時までです。"
    "時間外でもチャットでご連絡いただければ、翌営業日に担当者からご返信いたします。",
    "新しい普通預金口座の金利は年三・二パーセントで、毎日計算され、毎月お支払いします。"
    "最低残高はありませんが、一日に五十万円を超える引き出しには、ご登録の電話番号にお送りする"
    "確認コードが必要です。",
]

MIXED = [
    "我的订单号是 ORD-20250314-7781，tracking number 是 1Z999AA10123456784，请帮我查一下 "
    "DHL 的 status，谢谢！",
    "航班 CA1234 从 PEK 飞 SIN，departure time 是 09:35，我想 upgrade 到 business class，"
    "可以用 miles 吗？我的会员号是 CA 8812 3456。",
    "The customer wrote: 「商品が届いていません」 and asked for a refund of ¥12,900 to "
    "her Visa card ending in 4421.",
    "我用的是 iPhone 15 Pro，iOS 17.4，App 版本 3.2.1，登录的时候一直提示 error code 403，"
    "重装了也没用。",
    "Please reply in Chinese: 您的退款 ¥1,299.00 已于 2025-03-14 原路退回，预计 3-5 个工作日到账。",
    "안녕하세요, 주문 번호 88123 의 배송 상태를 확인하고 싶습니다. 감사합니다 🙏 Thanks a lot 😊👍",
]

CODE = [
    "def refund(order_id: str, amount: float) -> dict:\n"
    "    order = db.orders.get(order_id)\n"
    "    if order is None or amount > order.total:\n"
    '        raise ValueError(f"cannot refund {amount} on {order_id}")\n'
    '    return {"order": order_id, "refunded": round(amount, 2), "status": "ok"}\n',
    "SELECT o.id, o.total, c.email FROM orders o JOIN customers c ON c.id = o.customer_id\n"
    "WHERE o.created_at >= '2025-03-01' AND o.status IN ('paid', 'shipped')\n"
    "ORDER BY o.created_at DESC LIMIT 50;\n",
    '{"booking": "ABX42K", "passengers": [{"name": "Ada Lovelace", "seat": "14A", '
    '"meal": "VGML"}], "segments": [{"from": "LHR", "to": "SIN", "flight": "SQ317", '
    '"departure": "2025-03-14T09:35:00Z"}]}',
    "for (let i = 0; i < items.length; i++) {\n"
    "  const item = items[i];\n"
    "  if (!item.inStock) { console.warn(`missing ${item.sku}`); continue; }\n"
    "  total += item.price * item.qty;\n"
    "}\n",
]

SAMPLES: dict[str, list[str]] = {"en": EN, "zh": ZH, "ja": JA, "mixed": MIXED, "code": CODE}
"""Language -> texts."""
