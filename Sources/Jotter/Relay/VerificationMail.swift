/// The mail that carries a verification code: a fixed template per language. Nothing a requester
/// typed appears in it; the only thing of theirs in the mail is the address it goes to.
enum VerificationMail {
    /// The page's languages.
    static let languages = ["ja", "en", "es", "fr", "de", "it", "pt", "ko", "zh-Hans", "zh-Hant", "ru", "ar"]

    /// The template language for a requested tag: exact (any case), else by its primary subtag
    /// (`pt-BR` → `pt`; Chinese by script or region: `zh-TW`, `zh-HK`, `zh-MO` → `zh-Hant`, other
    /// `zh` → `zh-Hans`), else English.
    static func language(for tag: String?) -> String {
        guard let tag, !tag.isEmpty, tag.utf8.count <= 35 else { return "en" }
        let lower = tag.lowercased().replacingLiterally("_", with: "-")
        if let exact = languages.first(where: { $0.lowercased() == lower }) { return exact }
        let subtags = lower.split(separator: "-")
        guard let primary = subtags.first else { return "en" }
        if primary == "zh" {
            let traditional = subtags.dropFirst().contains { ["hant", "tw", "hk", "mo"].contains($0) }
            return traditional ? "zh-Hant" : "zh-Hans"
        }
        return languages.first { $0 == primary } ?? "en"
    }

    /// The subject and body for `code` in `language` (one of `languages`; others get English).
    static func render(code: String, language: String) -> (subject: String, body: String) {
        let template = templates[language] ?? templates["en"] ?? ("", "")
        return (template.subject.replacingLiterally("{code}", with: code),
                template.body.replacingLiterally("{code}", with: code))
    }

    private static let templates: [String: (subject: String, body: String)] = [
        "en": ("Your Jotter code: {code}", """
            Your Jotter verification code is:

                {code}

            Enter it in Jotter to receive your memos at this address. It works once, for 10 minutes.

            If you did not ask for this code, ignore this message: without the code, nothing will be \
            sent to this address.

            """),
        "ja": ("Jotter の確認コード: {code}", """
            Jotter の確認コードです:

                {code}

            このアドレスでメモを受け取るには、Jotter にこのコードを入力してください。有効期限は10分で、一度だけ使えます。

            このコードに心当たりがない場合は、このメールを無視してください。コードがなければ、このアドレスには何も送られません。

            """),
        "es": ("Tu código de Jotter: {code}", """
            Tu código de verificación de Jotter es:

                {code}

            Introdúcelo en Jotter para recibir tus notas en esta dirección. Sirve una sola vez, durante 10 minutos.

            Si no pediste este código, ignora este mensaje: sin el código no se enviará nada a esta dirección.

            """),
        "fr": ("Votre code Jotter : {code}", """
            Votre code de vérification Jotter est :

                {code}

            Saisissez-le dans Jotter pour recevoir vos notes à cette adresse. Il ne sert qu’une fois, \
            pendant 10 minutes.

            Si vous n’avez pas demandé ce code, ignorez ce message : sans le code, rien ne sera envoyé \
            à cette adresse.

            """),
        "de": ("Dein Jotter-Code: {code}", """
            Dein Jotter-Bestätigungscode lautet:

                {code}

            Gib ihn in Jotter ein, um deine Notizen an diese Adresse zu bekommen. Er gilt einmal, 10 Minuten lang.

            Wenn du diesen Code nicht angefordert hast, ignoriere diese Nachricht: Ohne den Code wird \
            nichts an diese Adresse gesendet.

            """),
        "it": ("Il tuo codice Jotter: {code}", """
            Il tuo codice di verifica Jotter è:

                {code}

            Inseriscilo in Jotter per ricevere le tue note a questo indirizzo. Vale una sola volta, per 10 minuti.

            Se non hai richiesto questo codice, ignora questo messaggio: senza il codice non verrà \
            inviato nulla a questo indirizzo.

            """),
        "pt": ("Seu código do Jotter: {code}", """
            Seu código de verificação do Jotter é:

                {code}

            Digite-o no Jotter para receber suas notas neste endereço. Ele vale uma única vez, por 10 minutos.

            Se você não pediu este código, ignore esta mensagem: sem o código, nada será enviado para \
            este endereço.

            """),
        "ko": ("Jotter 인증 코드: {code}", """
            Jotter 인증 코드입니다:

                {code}

            이 주소로 메모를 받으려면 Jotter에 이 코드를 입력하세요. 10분 동안 한 번만 사용할 수 있습니다.

            이 코드를 요청하지 않았다면 이 메일을 무시하세요. 코드가 없으면 이 주소로 아무것도 보내지지 않습니다.

            """),
        "zh-Hans": ("你的 Jotter 验证码：{code}", """
            你的 Jotter 验证码是：

                {code}

            在 Jotter 中输入此验证码，即可在此地址接收你的备忘。验证码只能使用一次，10 分钟内有效。

            如果你没有请求此验证码，请忽略这封邮件：没有验证码，不会有任何内容发送到此地址。

            """),
        "zh-Hant": ("你的 Jotter 驗證碼：{code}", """
            你的 Jotter 驗證碼是：

                {code}

            在 Jotter 中輸入此驗證碼，即可在此地址接收你的備忘。驗證碼只能使用一次，10 分鐘內有效。

            如果你沒有要求此驗證碼，請忽略這封郵件：沒有驗證碼，不會有任何內容寄到此地址。

            """),
        "ru": ("Ваш код Jotter: {code}", """
            Ваш код подтверждения Jotter:

                {code}

            Введите его в Jotter, чтобы получать заметки на этот адрес. Код действует один раз в течение 10 минут.

            Если вы не запрашивали этот код, просто проигнорируйте это письмо: без кода на этот адрес \
            ничего не будет отправлено.

            """),
        "ar": ("رمز Jotter الخاص بك: {code}", """
            رمز التحقق الخاص بك في Jotter هو:

                {code}

            أدخله في Jotter لتصلك ملاحظاتك على هذا العنوان. يعمل الرمز مرة واحدة فقط، لمدة 10 دقائق.

            إذا لم تطلب هذا الرمز، فتجاهل هذه الرسالة: بدون الرمز لن يُرسَل أي شيء إلى هذا العنوان.

            """),
    ]
}
