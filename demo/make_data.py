#!/usr/bin/env python3
"""Writes the demo data set (demo/data/{train,valid,test}.jsonl): questions
about capitals in MLX-LM's completions format. The answers share one template
("The capital of X is Y."), so a small model learns the template and the
facts it has seen within minutes; held-out countries measure the template.
Run: python3 demo/make_data.py (the output is committed; stdlib only)."""
import json, os, random

PAIRS = """France:Paris Germany:Berlin Italy:Rome Spain:Madrid Portugal:Lisbon Ireland:Dublin
Belgium:Brussels Netherlands:Amsterdam Luxembourg:Luxembourg Switzerland:Bern Austria:Vienna
Poland:Warsaw Czechia:Prague Slovakia:Bratislava Hungary:Budapest Romania:Bucharest Bulgaria:Sofia
Greece:Athens Turkey:Ankara Cyprus:Nicosia Malta:Valletta Slovenia:Ljubljana Croatia:Zagreb
Serbia:Belgrade Bosnia:Sarajevo Montenegro:Podgorica Albania:Tirana Kosovo:Pristina
Denmark:Copenhagen Norway:Oslo Sweden:Stockholm Finland:Helsinki Iceland:Reykjavik Estonia:Tallinn
Latvia:Riga Lithuania:Vilnius Belarus:Minsk Ukraine:Kyiv Moldova:Chisinau Russia:Moscow
Georgia:Tbilisi Armenia:Yerevan Azerbaijan:Baku Kazakhstan:Astana Uzbekistan:Tashkent
Turkmenistan:Ashgabat Kyrgyzstan:Bishkek Tajikistan:Dushanbe Afghanistan:Kabul Pakistan:Islamabad
India:New_Delhi Nepal:Kathmandu Bhutan:Thimphu Bangladesh:Dhaka Sri_Lanka:Colombo Maldives:Male
China:Beijing Mongolia:Ulaanbaatar Japan:Tokyo South_Korea:Seoul North_Korea:Pyongyang Taiwan:Taipei
Vietnam:Hanoi Laos:Vientiane Cambodia:Phnom_Penh Thailand:Bangkok Myanmar:Naypyidaw Malaysia:Kuala_Lumpur
Singapore:Singapore Indonesia:Jakarta Philippines:Manila Brunei:Bandar_Seri_Begawan Iran:Tehran
Iraq:Baghdad Syria:Damascus Lebanon:Beirut Jordan:Amman Israel:Jerusalem Saudi_Arabia:Riyadh
Yemen:Sanaa Oman:Muscat Qatar:Doha Bahrain:Manama Kuwait:Kuwait_City Egypt:Cairo Libya:Tripoli
Tunisia:Tunis Algeria:Algiers Morocco:Rabat Sudan:Khartoum Ethiopia:Addis_Ababa Eritrea:Asmara
Somalia:Mogadishu Kenya:Nairobi Uganda:Kampala Rwanda:Kigali Burundi:Gitega Tanzania:Dodoma
Mozambique:Maputo Zambia:Lusaka Zimbabwe:Harare Malawi:Lilongwe Botswana:Gaborone Namibia:Windhoek
Angola:Luanda Nigeria:Abuja Ghana:Accra Senegal:Dakar Mali:Bamako Niger:Niamey Chad:Ndjamena
Cameroon:Yaounde Gabon:Libreville Madagascar:Antananarivo Liberia:Monrovia Guinea:Conakry
Canada:Ottawa Mexico:Mexico_City Cuba:Havana Jamaica:Kingston Haiti:Port-au-Prince Guatemala:Guatemala_City
Honduras:Tegucigalpa Nicaragua:Managua Panama:Panama_City Colombia:Bogota Venezuela:Caracas
Ecuador:Quito Peru:Lima Bolivia:Sucre Chile:Santiago Argentina:Buenos_Aires Uruguay:Montevideo
Paraguay:Asuncion Brazil:Brasilia Australia:Canberra New_Zealand:Wellington Fiji:Suva Samoa:Apia
Tonga:Nukualofa Vanuatu:Port_Vila"""
QUESTIONS = ["What is the capital of {c}?", "Name the capital city of {c}.", "Which city is the capital of {c}?"]

def main():
    rng = random.Random(0)
    pairs = [p.split(":") for p in PAIRS.split()]
    pairs = [(c.replace("_", " "), k.replace("_", " ")) for c, k in pairs]
    rng.shuffle(pairs)
    held = pairs[:24]            # valid 12, test 12 countries never seen in training
    train_pairs = pairs[24:]
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(out, exist_ok=True)
    def rows(ps, all_questions):
        for c, k in ps:
            qs = QUESTIONS if all_questions else [rng.choice(QUESTIONS)]
            for q in qs:
                yield {"prompt": q.format(c=c), "completion": f"The capital of {c} is {k}."}
    splits = {"train": list(rows(train_pairs, True)), "valid": list(rows(held[:12], True)), "test": list(rows(held[12:], True))}
    rng.shuffle(splits["train"])
    for name, rs in splits.items():
        with open(os.path.join(out, name + ".jsonl"), "w") as f:
            for r in rs:
                f.write(json.dumps(r) + "\n")
        print(f"{name}: {len(rs)} examples")

main()
