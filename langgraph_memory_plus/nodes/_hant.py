"""Traditional Chinese characters folded to simplified, for matching only.

A small built-in table (no dependency, no converter): the common characters of chat
about travel, accounts and assistants, common characters of names, and every character
the scanner's Chinese rules use. Matching folds both sides, so a user who writes 商務艙
or searches 張三 meets the rules and memories written 商务舱 and 张三; what is stored
and shown is never changed.
A character outside the table is kept as written.
"""

from __future__ import annotations

TRADITIONAL = (
    "無視規則設統詞錢轉給別現從開發員們這賬帳戶積額驗證認碼過繞記讓條據應當戲擬裝謂權"
    "歷歲輸憶換變為務須將對話時號餘機協議請聽僅廢棄隱啟啓關閉導個後裡裏說讀寫顯題蓋銷"
    "刪斷丟範約準繫係師駭資匯劃動偽執實際該絕項構層級確幫習慣錄錯麼嗎護違與於並獲處職"
    "紀謹嚴極終線遊飾腦態倫審濾舊產總擊滅殺費價單筆鑰網絡結鏈傳遞達殼內頭優屬專預鎖憑"
    "論屆萬億圓幣兌點數紅勵獎來會國學還樣經問長見飛場車訂艙濟歡較買賣銀東門間覺氣電鐵"
    "飯館麵雞魚豬貓鳥書語識邊遠運園區醫藥業備計畫標選擇貴雙張劉陳楊趙黃吳鄭馬孫許謝鄧"
    "蕭馮葉蘇盧蔣韓魯顧龍鳳華義寶麗婦媽爺兒親愛難齡樓廳廁陽陰風雲沒臺灣廣滬濱遼寧夠幾"
    "兩隻頁緊綠藍靜類舉辦決討葷飲貨櫃臥鋪簽籤檢稅週曆鐘錶購離側輕鬆適窩壞衛廚療險溫熱"
    "滿寬擠亂髒淨糧麥蘋蔥薑蝦醬鹽湯餃飽餓臨搶誤遲齊縣鎮陸島岡橋輛駕駛檯託續貼脫帶掛墊"
    "燈聲響鬧嬰觀賞偉鵬濤軍傑輝強剛慶聰穎瑩綺嬌鳴鍾譚賴閻賀龔龐顏羅鄒聶駱韋歐潔紹維憲"
    "賢興順穩鴻嘯楓樺蓮薈藝詩夢嵐曉驊騰馳勝勁貞"
)
SIMPLIFIED = (
    "无视规则设统词钱转给别现从开发员们这账账户积额验证认码过绕记让条据应当戏拟装谓权"
    "历岁输忆换变为务须将对话时号余机协议请听仅废弃隐启启关闭导个后里里说读写显题盖销"
    "删断丢范约准系系师骇资汇划动伪执实际该绝项构层级确帮习惯录错么吗护违与于并获处职"
    "纪谨严极终线游饰脑态伦审滤旧产总击灭杀费价单笔钥网络结链传递达壳内头优属专预锁凭"
    "论届万亿圆币兑点数红励奖来会国学还样经问长见飞场车订舱济欢较买卖银东门间觉气电铁"
    "饭馆面鸡鱼猪猫鸟书语识边远运园区医药业备计画标选择贵双张刘陈杨赵黄吴郑马孙许谢邓"
    "萧冯叶苏卢蒋韩鲁顾龙凤华义宝丽妇妈爷儿亲爱难龄楼厅厕阳阴风云没台湾广沪滨辽宁够几"
    "两只页紧绿蓝静类举办决讨荤饮货柜卧铺签签检税周历钟表购离侧轻松适窝坏卫厨疗险温热"
    "满宽挤乱脏净粮麦苹葱姜虾酱盐汤饺饱饿临抢误迟齐县镇陆岛冈桥辆驾驶台托续贴脱带挂垫"
    "灯声响闹婴观赏伟鹏涛军杰辉强刚庆聪颖莹绮娇鸣钟谭赖阎贺龚庞颜罗邹聂骆韦欧洁绍维宪"
    "贤兴顺稳鸿啸枫桦莲荟艺诗梦岚晓骅腾驰胜劲贞"
)
assert len(TRADITIONAL) == len(SIMPLIFIED)

FOLD = str.maketrans(TRADITIONAL, SIMPLIFIED)
"""``text.translate(FOLD)``: ``text`` with the table's traditional characters simplified."""


def simplified(text: str) -> str:
    """``text`` with the table's traditional characters folded to simplified."""
    return text.translate(FOLD)
